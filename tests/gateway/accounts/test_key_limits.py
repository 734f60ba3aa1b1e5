"""A key's own limits in the store and the authenticator, with a clock the test moves: expiry and a
rotation's overlap are read against the clock at every request (not the key cache's age), last use is
written in batches, and an existing (v5) database gains the columns with its keys intact."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import event, inspect

from gateway.accounts.budgets import period_bounds
from gateway.accounts.key_budgets import spent_by_key
from gateway.accounts.storage import open_database
from gateway.accounts.tenants import Authenticator, KeyLimits, TenantLimits, TenantStore, checked_limits
from gateway.errors import AuthenticationFailed, InvalidRequest


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> TenantStore:
    store = TenantStore(open_database(f"sqlite:///{tmp_path / 'db.sqlite'}"), TenantLimits())
    store.create_tenant("acme")
    return store


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_expiry_and_a_rotations_overlap_follow_the_clock_not_the_cache(store: TenantStore) -> None:
    clock = Clock()
    auth = Authenticator(store, cache_s=3600, clock=clock)  # cached an hour: the clock still decides
    limits = checked_limits({"expires_at": clock.now + 100, "tiers": "edge", "requests_per_min": 3})
    made = store.create_key("acme", "ci", limits=limits)

    async def run() -> None:
        caller = await auth.caller(bearer(made.key))
        assert caller.limits.tiers == ("edge",) and caller.limits.requests_per_min == 3
        rotated = store.rotate_key(made.id, overlap_s=10, now=clock.now)
        auth.forget(made.id)
        assert rotated.id == made.id and rotated.key != made.key and rotated.limits == limits
        await auth.caller(bearer(made.key))  # the old secret, in its overlap
        await auth.caller(bearer(rotated.key))
        clock.now += 10
        with pytest.raises(AuthenticationFailed, match="rotated"):
            await auth.caller(bearer(made.key))
        await auth.caller(bearer(rotated.key))
        clock.now += 90
        with pytest.raises(AuthenticationFailed, match="expired"):
            await auth.caller(bearer(rotated.key))

    asyncio.run(run())


def test_last_used_is_written_in_one_batch_not_per_request(store: TenantStore) -> None:
    clock = Clock()
    auth = Authenticator(store, cache_s=3600, clock=clock)
    keys = [store.create_key("acme", f"k{i}") for i in range(3)]
    updates: list[str] = []
    event.listen(
        store.engine,
        "before_cursor_execute",
        lambda conn, cursor, statement, *a: (
            updates.append(statement) if statement.startswith("UPDATE") else None
        ),
    )

    async def run() -> None:
        for _ in range(50):
            for key in keys:
                await auth.caller(bearer(key.key))
            clock.now += 1
        assert updates == []  # 150 requests, no write yet
        await auth.flush_last_used()

    asyncio.run(run())
    assert len(updates) == 3  # one UPDATE per key used, whatever the requests
    assert {k.id: k.last_used for k in store.list_keys("acme")} == {k.id: clock.now - 1 for k in keys}


def test_limits_are_checked_and_unknown_ones_refused() -> None:
    assert checked_limits({"tiers": "edge, cloud,edge", "models": ["a"]}) == KeyLimits(
        tiers=("edge", "cloud"), models=("a",)
    )
    assert checked_limits({"expires_at": "2027-01-31T00:00:00Z"}).expires_at == 1801353600.0
    for bad in ({"budget_day_usd": -1}, {"requests_per_min": 1.5}, {"expires_at": "soon"}, {"rpm_x": 1}):
        with pytest.raises(InvalidRequest):
            checked_limits(bad)
    base = checked_limits({"tiers": "edge", "requests_per_min": 4})
    assert checked_limits({"tiers": None}, base) == KeyLimits(requests_per_min=4)  # null clears one


def test_a_v5_database_gains_the_key_columns_and_its_keys_keep_working(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    first = TenantStore(open_database(f"sqlite:///{path}"), TenantLimits())
    first.create_tenant("acme")
    made = first.create_key("acme", "old")
    first.engine.dispose()
    with sqlite3.connect(path) as conn:  # back to v5: the api_keys table as it was
        conn.executescript(
            """
            DELETE FROM schema_version WHERE version >= 6;
            CREATE TABLE k5 AS SELECT id, tenant_id, role, key_hash, name, created_at, revoked_at FROM api_keys;
            DROP TABLE api_keys;
            ALTER TABLE k5 RENAME TO api_keys;
            """
        )
    engine = open_database(f"sqlite:///{path}")
    columns = {c["name"] for c in inspect(engine).get_columns("api_keys")}
    assert {"budget_day_usd", "tiers", "models", "expires_at", "last_used", "previous_hash"} <= columns
    store = TenantStore(engine, TenantLimits())
    found = store.lookup(made.id)
    assert found is not None and found.limits == KeyLimits() and not found.revoked
    assert asyncio.run(Authenticator(store, cache_s=1).caller(bearer(made.key))).key_id == made.id


NEW_COLUMNS = (
    "budget_day_usd",
    "budget_month_usd",
    "tiers",
    "models",
    "expires_at",
    "requests_per_min",
    "tokens_per_min",
    "last_used",
    "previous_hash",
    "previous_until",
)


def test_on_postgresql_a_v5_database_is_migrated_and_a_keys_spend_is_summed(postgres_url: str) -> None:
    engine = open_database(postgres_url)
    with engine.begin() as conn:  # back to v5
        for column in NEW_COLUMNS:
            conn.exec_driver_sql(f"ALTER TABLE api_keys DROP COLUMN IF EXISTS {column}")
        conn.exec_driver_sql("DELETE FROM schema_version WHERE version >= 6")
    engine.dispose()
    engine = open_database(postgres_url)
    assert set(NEW_COLUMNS) <= {c["name"] for c in inspect(engine).get_columns("api_keys")}
    store = TenantStore(engine, TenantLimits())
    name = f"pg-{uuid.uuid4().hex[:8]}"
    tenant = store.create_tenant(name)
    made = store.create_key(name, limits=checked_limits({"budget_day_usd": 2, "models": "m1,m2"}))
    assert store.key(made.id).limits == KeyLimits(budget_day_usd=2.0, models=("m1", "m2"))
    rotated = store.rotate_key(made.id, 60)
    auth = Authenticator(store, cache_s=1)
    for key in (made.key, rotated.key):
        assert asyncio.run(auth.caller(bearer(key))).limits.budget_day_usd == 2.0
    now = time.time()
    day, month = period_bounds("day", now)[0], period_bounds("month", now)[0]
    assert spent_by_key(engine, tenant.id, made.id, day, month) == (0.0, 0.0)
    engine.dispose()
