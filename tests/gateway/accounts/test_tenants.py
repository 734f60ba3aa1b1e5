"""Tenants and keys: lifecycle in the database, hashes only, constant-time compare."""

from __future__ import annotations

import hmac
from pathlib import Path

import pytest
from sqlalchemy import select

from gateway.accounts.storage import api_keys, open_database
from gateway.accounts.tenants import (
    Authenticator,
    TenantLimits,
    TenantStore,
    hash_key,
    key_id_of,
    matches,
    new_key,
)
from gateway.errors import AuthenticationFailed, Conflict, InvalidRequest, NotFound


@pytest.fixture
def store(tmp_path: Path) -> TenantStore:
    return TenantStore(open_database(f"sqlite:///{tmp_path / 'db.sqlite'}"), TenantLimits(tokens_per_min=99))


def test_a_key_is_random_and_only_its_hash_is_stored(store: TenantStore) -> None:
    store.create_tenant("acme")
    made = store.create_key("acme", "ci")
    assert made.key.startswith(f"tg_{made.id}_") and key_id_of(made.key) == made.id
    assert made.key != store.create_key("acme").key
    with store.engine.connect() as conn:
        stored = conn.execute(select(api_keys).where(api_keys.c.id == made.id)).one()
    assert stored.key_hash == hash_key(made.key)
    assert made.key not in str(tuple(stored))


def test_key_lifecycle(store: TenantStore) -> None:
    tenant = store.create_tenant("acme", {"requests_per_min": 5})
    assert tenant.limits.requests_per_min == 5 and tenant.limits.tokens_per_min == 99  # own, then default
    made = store.create_key("acme", "ci")
    assert [k.id for k in store.list_keys("acme")] == [made.id]
    found = store.lookup(made.id)
    assert found is not None and found.tenant is not None and found.tenant.name == "acme"
    assert found.revoked is False
    revoked = store.revoke_key(made.id)
    assert revoked.revoked_at is not None
    again = store.lookup(made.id)
    assert again is not None and again.revoked is True


def test_bad_tenant_names_duplicates_and_unknowns(store: TenantStore) -> None:
    with pytest.raises(InvalidRequest):
        store.create_tenant("Not OK!")
    with pytest.raises(InvalidRequest, match="unknown limits"):
        store.create_tenant("acme", {"requests_per_hour": 1})
    store.create_tenant("acme")
    with pytest.raises(Conflict):
        store.create_tenant("acme")
    with pytest.raises(NotFound):
        store.create_key("nobody")
    with pytest.raises(NotFound):
        store.revoke_key("000000000000")


def test_bootstrap_creates_admin_and_default_key_once(store: TenantStore) -> None:
    made = store.bootstrap()
    assert made is not None
    admin, default = made
    assert admin.role == "admin" and admin.tenant is None
    assert default.tenant == "default"
    assert store.bootstrap() is None


def test_keys_are_compared_with_hmac_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    _, key, stored = new_key()
    assert matches(key, stored)
    assert not matches(key + "x", stored)
    assert not matches(key, None)  # unknown key: still one compare, against a dummy hash
    assert len(calls) == 3
    assert all(len(a) == len(b) == 64 for a, b in calls)  # hashes are compared, never raw keys


async def test_authenticator_refuses_missing_wrong_and_revoked_keys(store: TenantStore) -> None:
    store.create_tenant("acme")
    made = store.create_key("acme")
    auth = Authenticator(store, cache_s=60)
    caller = await auth.caller({"authorization": f"Bearer {made.key}"})
    assert caller.tenant is not None and caller.tenant.name == "acme" and caller.key_id == made.id
    altered = made.key[:-1] + ("y" if made.key.endswith("x") else "x")  # a random key may end in "x"
    for headers in (
        {},
        {"authorization": made.key},
        {"authorization": "Bearer "},
        {"authorization": "Bearer sk-something"},
        {"authorization": f"Bearer {altered}"},
        {"authorization": f"Bearer tg_{'0' * 12}_abc"},
    ):
        with pytest.raises(AuthenticationFailed):
            await auth.caller(headers)
    store.revoke_key(made.id)
    await auth.caller({"authorization": f"Bearer {made.key}"})  # cached for cache_s
    auth.forget(made.id)
    with pytest.raises(AuthenticationFailed, match="revoked"):
        await auth.caller({"authorization": f"Bearer {made.key}"})
