"""People from single sign-on: the ``[admin_ui.oidc]`` settings, groups mapped to roles, and the one
read/change rule the admin API and the admin UI share (browser tests: tests/browser/test_sso.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, OctKey, RSAKey

from gateway.accounts.admin import audit_scope
from gateway.accounts.people import OidcSettings, RelyingParty, SignInFailed, groups_of, person_caller
from gateway.accounts.tenants import (
    ADMIN,
    TENANT,
    TENANT_ADMIN,
    VIEWER,
    Caller,
    Tenant,
    TenantLimits,
    check_change,
    check_read,
)
from gateway.errors import NotFound, PermissionDenied
from gateway.settings import SettingsError, load_settings

ROLES = {
    "ops": "admin",
    "audit": "viewer",
    "blue-leads": "tenant-admin:blue",
    "red-leads": "tenant-admin:red",
}
OIDC = (
    '[admin_ui.oidc]\nissuer = "https://idp.example.com"\nclient_id = "tiergate"\n'
    'client_secret_env = "OIDC_SECRET"\n[admin_ui.oidc.roles]\n"ops" = "admin"\n'
)


def test_groups_map_to_the_strongest_role_they_name() -> None:
    admin = person_caller("a@x", ["audit", "ops"], ROLES)
    assert admin is not None and admin.role == ADMIN
    both = person_caller("t@x", ["red-leads", "audit", "blue-leads"], ROLES)
    assert both is not None and both.role == TENANT_ADMIN and both.tenants == ("blue", "red")
    viewer = person_caller("v@x", ["audit", "everyone"], ROLES)
    assert viewer is not None and viewer.role == VIEWER and viewer.person == "v@x"
    assert viewer.key_id == "person:v@x"
    assert person_caller("n@x", ["everyone"], ROLES) is None
    assert person_caller("n@x", [], ROLES) is None


def test_the_groups_claim_is_a_list_or_one_string() -> None:
    assert groups_of({"groups": ["a", "b", 3]}, "groups") == ["a", "b"]
    assert groups_of({"roles": "a"}, "roles") == ["a"]
    assert groups_of({"groups": {"a": 1}}, "groups") == []
    assert groups_of({}, "groups") == []


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (OIDC.replace('client_id = "tiergate"\n', ""), "client_id is required"),
        (OIDC + '"x" = "owner"\n', "a role is"),
        (OIDC + '"x" = "tenant-admin:"\n', "a role is"),
        (OIDC.replace('"ops" = "admin"\n', ""), "maps no group"),
        (
            OIDC.replace(
                'client_secret_env = "OIDC_SECRET"', 'client_secret_env = "A"\nclient_secret_file = "/f"'
            ),
            "not both",
        ),
        (OIDC.replace('issuer = "https://idp.example.com"', 'issuer = "idp.example.com"'), "https://"),
        ("[admin_ui]\nkey_sign_in = false\n", "needs [admin_ui.oidc]"),
        (OIDC.replace("[admin_ui.oidc]\n", '[admin_ui.oidc]\nscopes = ["email"]\n'), 'include "openid"'),
    ],
)
def test_settings_are_checked_at_start(tmp_path: Path, toml: str, message: str) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(toml)
    with pytest.raises(SettingsError, match=message.replace("[", r"\[")):
        load_settings(config, environ={})


def test_the_client_secret_comes_from_the_environment_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OIDC_SECRET", "s3cret")
    settings = OidcSettings(
        issuer="https://i", client_id="c", client_secret_env="OIDC_SECRET", roles={"g": "admin"}
    )
    assert settings.client_secret() == "s3cret"
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    assert (
        OidcSettings(
            issuer="https://i", client_id="c", client_secret_file=str(secret), roles={"g": "admin"}
        ).client_secret()
        == "from-a-file"
    )
    assert OidcSettings(issuer="https://i", client_id="c", roles={"g": "admin"}).client_secret() is None
    monkeypatch.delenv("OIDC_SECRET")
    with pytest.raises(ValueError, match="OIDC_SECRET is empty"):
        settings.client_secret()


def test_tiergate_config_shows_where_the_secret_is_never_the_secret(tmp_path: Path) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(OIDC)
    shown = subprocess.run(
        [sys.executable, "-m", "gateway", "config", "--config", str(config)],
        capture_output=True,
        text=True,
        env={"OIDC_SECRET": "never-shown-secret", "PATH": "/usr/bin:/bin"},
        check=True,
    ).stdout
    assert "OIDC_SECRET" in shown and "never-shown-secret" not in shown


BLUE = Tenant(id=1, name="blue", created_at=0.0, limits=TenantLimits())
CALLERS = {
    "admin key": Caller(key_id="k1", role=ADMIN, tenant=None),
    "admin person": Caller(key_id="person:a", role=ADMIN, tenant=None, person="a"),
    "viewer": Caller(key_id="person:v", role=VIEWER, tenant=None, person="v"),
    "tenant-admin person": Caller(
        key_id="person:t", role=TENANT_ADMIN, tenant=None, person="t", tenants=("blue",)
    ),
    "tenant-admin key": Caller(key_id="k2", role=TENANT_ADMIN, tenant=BLUE),
    "inference key": Caller(key_id="k3", role=TENANT, tenant=BLUE),
}
OK, FORBIDDEN, MISSING = "ok", "403", "404"
# caller → (read gateway-wide, change gateway-wide, read blue, change blue, read green, change green)
EXPECTED = {
    "admin key": (OK, OK, OK, OK, OK, OK),
    "admin person": (OK, OK, OK, OK, OK, OK),
    "viewer": (OK, FORBIDDEN, OK, FORBIDDEN, OK, FORBIDDEN),
    "tenant-admin person": (FORBIDDEN, FORBIDDEN, OK, OK, MISSING, MISSING),
    "tenant-admin key": (FORBIDDEN, FORBIDDEN, OK, OK, MISSING, MISSING),
    "inference key": (FORBIDDEN, FORBIDDEN, OK, FORBIDDEN, MISSING, MISSING),
}


def _outcome(check: Callable[[Caller, str | None, str], None], caller: Caller, tenant: str | None) -> str:
    try:
        check(caller, tenant, "it is")
    except PermissionDenied:
        return FORBIDDEN
    except NotFound:
        return MISSING
    return OK


@pytest.mark.parametrize("who", list(CALLERS))
def test_one_rule_for_keys_and_people(who: str) -> None:
    caller = CALLERS[who]
    got = tuple(
        _outcome(check, caller, tenant)
        for tenant in (None, "blue", "green")
        for check in (check_read, check_change)
    )
    assert got == EXPECTED[who]


def test_the_audit_trail_scope_of_people() -> None:
    assert audit_scope(CALLERS["viewer"]) is None  # every row, as an admin reads it
    assert audit_scope(CALLERS["admin person"]) is None
    two = Caller(key_id="person:t", role=TENANT_ADMIN, tenant=None, person="t", tenants=("blue", "red"))
    assert audit_scope(two) == frozenset({"blue", "red"})
    with pytest.raises(PermissionDenied):
        audit_scope(CALLERS["inference key"])


ISSUER = "https://idp.example.com"
SIGNING = RSAKey.generate_key(2048, parameters={"kid": "k1", "alg": "RS256"})


def _party() -> RelyingParty:
    """A relying party whose discovery document and keys are already read (the provider itself is
    exercised in tests/browser/test_sso.py): the provider announces HMAC and none besides RS256."""
    party = RelyingParty(OidcSettings(issuer=ISSUER, client_id="tiergate", roles={"g": "admin"}))
    party._metadata = {
        "issuer": ISSUER,
        "authorization_endpoint": f"{ISSUER}/auth",
        "token_endpoint": f"{ISSUER}/token",
        "jwks_uri": f"{ISSUER}/jwks",
        "id_token_signing_alg_values_supported": ["RS256", "HS256", "none"],
    }
    party._jwks = KeySet.import_key_set({"keys": [SIGNING.as_dict(private=False)]})
    return party


def _claims(**changes: object) -> dict[str, object]:
    now = int(time.time())
    return {
        "iss": ISSUER,
        "aud": "tiergate",
        "sub": "ana",
        "exp": now + 300,
        "iat": now,
        "nonce": "n1",
    } | changes


def _verify(token: str, nonce: str = "n1") -> dict[str, object]:
    return asyncio.run(_party().verify(token, nonce))


def test_an_id_token_is_checked_claim_by_claim() -> None:
    good = jwt.encode({"alg": "RS256", "kid": "k1"}, _claims(), SIGNING)
    assert _verify(good)["sub"] == "ana"
    refused = {
        "another audience": _claims(aud="other-app"),
        "another issuer": _claims(iss="https://evil.example.com"),
        "expired": _claims(exp=int(time.time()) - 120),
        "no nonce": {k: v for k, v in _claims().items() if k != "nonce"},
    }
    for why, claims in refused.items():
        with pytest.raises(SignInFailed):
            _verify(jwt.encode({"alg": "RS256", "kid": "k1"}, claims, SIGNING))
            pytest.fail(why)
    with pytest.raises(SignInFailed, match="nonce"):
        _verify(good, nonce="another")


def test_only_public_key_signatures_are_taken() -> None:
    hmac_key = OctKey.import_key(b"a shared secret of thirty-two bytes!")
    hs256 = jwt.encode({"alg": "HS256", "kid": "k1"}, _claims(), hmac_key, algorithms=["HS256"])
    with pytest.raises(SignInFailed, match="signature"):
        _verify(hs256)
    head = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps(_claims()).encode()).rstrip(b"=").decode()
    with pytest.raises(SignInFailed):
        _verify(f"{head}.{body}.")
    other = RSAKey.generate_key(2048, parameters={"kid": "k1"})  # the right key id, another key
    with pytest.raises(SignInFailed, match="signature"):
        _verify(jwt.encode({"alg": "RS256", "kid": "k1"}, _claims(), other))
