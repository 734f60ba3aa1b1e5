"""People who sign in to the admin UI through the organisation's identity provider (OpenID Connect).

``[admin_ui.oidc]`` names the provider and this gateway's client there, and maps the provider's
groups (the ``roles_claim`` of the ID token) to roles here:

    admin                   everything
    viewer                  sees everything, changes nothing
    tenant-admin:<tenant>   that tenant's keys, policies and costs only (other tenants are invisible)

A person in several groups gets the strongest role they name: admin, else tenant admin of every
tenant named, else viewer. A person in no mapped group is refused. The client secret is never in the
settings file: ``client_secret_env`` names an environment variable, ``client_secret_file`` a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec

from gateway.accounts.tenants import ADMIN, TENANT_ADMIN, VIEWER, Caller

TENANT_ADMIN_PREFIX = f"{TENANT_ADMIN}:"


class OidcSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Sign-in through an OpenID provider (off while ``issuer`` is empty)."""

    issuer: str = ""  # e.g. "https://login.example.com/realms/ops"; discovery is read from it
    client_id: str = ""
    client_secret_env: str = ""  # the environment variable holding the client secret
    client_secret_file: str = ""  # or a file holding it (e.g. a mounted secret)
    roles_claim: str = "groups"  # the ID-token claim listing the person's groups
    roles: dict[str, str] = msgspec.field(default_factory=dict)  # group → role
    scopes: list[str] = msgspec.field(default_factory=lambda: ["openid", "email", "profile"])
    # Shown on the sign-in page's button.
    display_name: str = "single sign-on"

    def __post_init__(self) -> None:
        if not self.issuer:
            return
        if not self.issuer.startswith(("https://", "http://")):
            raise ValueError("admin_ui.oidc.issuer must be the provider's https:// URL")
        if not self.client_id:
            raise ValueError("admin_ui.oidc.client_id is required with an issuer")
        if self.client_secret_env and self.client_secret_file:
            raise ValueError("admin_ui.oidc: give client_secret_env or client_secret_file, not both")
        if "openid" not in self.scopes:
            raise ValueError('admin_ui.oidc.scopes must include "openid"')
        for group, role in self.roles.items():
            check_role(group, role)
        if not self.roles:
            raise ValueError("admin_ui.oidc.roles maps no group to a role: nobody could sign in")

    @property
    def enabled(self) -> bool:
        return bool(self.issuer)

    def client_secret(self) -> str | None:
        """The secret from its environment variable or file (None: a public client, PKCE only)."""
        if self.client_secret_env:
            secret = os.environ.get(self.client_secret_env, "")
            if not secret:
                raise ValueError(f"admin_ui.oidc: the environment variable {self.client_secret_env} is empty")
            return secret
        if self.client_secret_file:
            return Path(self.client_secret_file).read_text().strip()
        return None


def check_role(group: str, role: str) -> None:
    if role in (ADMIN, VIEWER):
        return
    if role.startswith(TENANT_ADMIN_PREFIX) and role.removeprefix(TENANT_ADMIN_PREFIX):
        return
    raise ValueError(
        f"admin_ui.oidc.roles: group {group!r} maps to {role!r}; "
        f'a role is "admin", "viewer" or "tenant-admin:<tenant>"'
    )


def groups_of(claims: dict[str, Any], claim: str) -> list[str]:
    """The groups an ID token names in ``claim`` (a list of strings, or one string)."""
    value = claims.get(claim)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def person_caller(person: str, groups: list[str], roles: dict[str, str]) -> Caller | None:
    """The caller a person with these groups acts as, None when no group maps to a role."""
    named = [roles[g] for g in groups if g in roles]
    key_id = f"person:{person}"
    if ADMIN in named:
        return Caller(key_id=key_id, role=ADMIN, tenant=None, person=person)
    tenants = tuple(
        sorted({r.removeprefix(TENANT_ADMIN_PREFIX) for r in named if r.startswith(TENANT_ADMIN_PREFIX)})
    )
    if tenants:
        return Caller(key_id=key_id, role=TENANT_ADMIN, tenant=None, person=person, tenants=tenants)
    if VIEWER in named:
        return Caller(key_id=key_id, role=VIEWER, tenant=None, person=person)
    return None
