"""Values the tenants package hands out: tenants, keys, and the caller of a request."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from gateway.accounts.tenants._keylimits import NO_LIMITS, KeyLimits
from gateway.accounts.tenants._settings import TenantLimits

ADMIN = "admin"  # every tenant; the only role that creates tenants, admin keys and tenant-admin keys
TENANT = "tenant"  # an inference key: chats and reads its own tenant, manages no keys
TENANT_ADMIN = "tenant-admin"  # a tenant's key that also creates, lists and revokes that tenant's keys
TENANT_ROLES = (TENANT, TENANT_ADMIN)  # the roles a tenant's key may have
VIEWER = "viewer"  # a person signed in through single sign-on who sees everything and changes nothing
DEFAULT_TENANT = "default"
OPEN_MODE_KEY_ID = "open-mode"  # the caller of every request under auth.open_mode


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    created_at: float
    limits: TenantLimits  # effective: the tenant's own, else the configured default


class KeyInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    tenant: str | None  # None for admin keys
    role: str
    name: str
    created_at: float
    revoked_at: float | None = None
    limits: KeyLimits = NO_LIMITS
    last_used: float | None = None  # as last written (batched: up to auth.last_used_flush_s behind)
    previous_until: float | None = None  # after a rotation: when the old key stops working


class NewKey(msgspec.Struct, frozen=True, kw_only=True):
    """A key as created: ``key`` is shown this once and never stored."""

    id: str
    tenant: str | None
    role: str
    name: str
    key: str
    limits: KeyLimits = NO_LIMITS


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: an admin (all tenants), a viewer (sees all, changes nothing), or a tenant's
    key (that tenant only; ``role`` says whether it may manage the tenant's keys).

    A person signed in to the admin UI through single sign-on is a caller too: ``person`` names
    them (the ID token's ``sub``/email), ``key_id`` is ``person:<sub>``, and a tenant admin among
    them holds ``tenants`` (every tenant their groups name) instead of one ``tenant``."""

    key_id: str
    role: str
    tenant: Tenant | None  # None for admin keys and for people
    limits: KeyLimits = NO_LIMITS  # the key's own, beneath its tenant's
    person: str = ""  # who signed in through single sign-on ("" for a key)
    tenants: tuple[str, ...] = ()  # the tenants a tenant-admin person administers

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    @property
    def sees_all(self) -> bool:
        """Every tenant is visible: an admin, or a viewer."""
        return self.role in (ADMIN, VIEWER)

    @property
    def read_only(self) -> bool:
        return self.role == VIEWER

    @property
    def tenant_names(self) -> tuple[str, ...]:
        """The tenants this caller is limited to (empty for admins and viewers)."""
        return (self.tenant.name,) if self.tenant is not None else self.tenants

    def may_see(self, tenant_name: str) -> bool:
        return self.sees_all or tenant_name in self.tenant_names

    def may_manage_keys(self, tenant_name: str) -> bool:
        """Whether this caller may create, list and revoke ``tenant_name``'s keys."""
        return self.is_admin or (self.role == TENANT_ADMIN and tenant_name in self.tenant_names)
