"""Tenant policies: validation naming the field, versions with who/when/before/after, rollback,
optimistic concurrency, and changes seen by another instance on the same database."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import router
from gateway.accounts.policies import DEFAULT_KEY, PolicyBook, PolicyStore
from gateway.accounts.storage import open_database
from gateway.errors import Conflict, InvalidRequest, NotFound
from tiers import Modality

TIERS = ("edge", "cloud")


@pytest.fixture
def store(tmp_path: Path) -> PolicyStore:
    return PolicyStore(open_database(f"sqlite:///{tmp_path / 'db.sqlite'}"), router.DEFAULT_POLICY, TIERS)


def test_decoding_names_the_bad_field() -> None:
    cases = {
        b'{"latency": {"total_ms": "fast"}}': "latency.total_ms",
        b'{"latency": {"percentile": 20}}': "latency.percentile",
        b'{"budget": {"amount_usd": -1}}': "budget.amount_usd",
        b'{"budget": {"period": "year"}}': "budget.period",
        b'{"quality_floor": 1.5}': "quality_floor",
        b'{"modality_rules": {"smell": "cloud"}}': "modality_rules",
        b'{"colour": "red"}': "colour",
    }
    for body, field in cases.items():
        with pytest.raises(router.PolicyInvalid) as caught:
            router.decode_policy(body)
        assert caught.value.field.startswith(field), (body, caught.value.field)


def test_names_are_checked_against_the_gateway() -> None:
    good = router.decode_policy(b'{"modality_rules": {"video": "cloud"}, "preferred_tier": "edge"}')
    assert router.check_policy(good, TIERS) is good
    assert good.modality_rules == {Modality.VIDEO: "cloud"}
    for name in ("always:cloud", "always-edge", "always-cloud", "round-robin"):
        assert router.check_policy(router.TenantPolicy(strategy=name), TIERS).strategy == name
    for body, field in (
        (b'{"strategy": "coin-flip"}', "strategy"),
        (b'{"strategy": "always:moon"}', "strategy"),
        (b'{"preferred_tier": "moon"}', "preferred_tier"),
        (b'{"modality_rules": {"video": "moon"}}', "modality_rules.video"),
    ):
        with pytest.raises(router.PolicyInvalid) as caught:
            router.check_policy(router.decode_policy(body), TIERS)
        assert caught.value.field == field


def test_a_tenant_without_a_policy_gets_the_default(store: PolicyStore) -> None:
    record = store.get("acme")
    assert record.source == "configured" and record.version == 0 and record.policy == router.DEFAULT_POLICY
    edited = router.TenantPolicy(strategy="always-cloud")
    store.set(DEFAULT_KEY, edited, "admin:k1")
    record = store.get("acme")
    assert record.source == "default" and record.policy == edited


def test_versions_record_who_when_before_and_after_and_rollback_restores(store: PolicyStore) -> None:
    first = router.TenantPolicy(strategy="always-edge")
    second = router.TenantPolicy(strategy="learned", budget=router.Budget(amount_usd=5, period="day"))
    assert store.set("acme", first, "admin:k1").version == 1
    record = store.set("acme", second, "admin:k2")
    assert record.version == 2 and record.policy == second and record.updated_by == "admin:k2"
    history = store.history("acme")
    assert [(c.version, c.action, c.changed_by) for c in history] == [
        (2, "set", "admin:k2"),
        (1, "set", "admin:k1"),
    ]
    assert history[0].before == first and history[0].after == second
    assert history[1].before is None and history[1].changed_at <= history[0].changed_at

    back = store.rollback("acme", 1, "admin:k3")
    assert back.version == 3 and back.policy == first
    newest = store.history("acme")[0]
    assert (newest.action, newest.before, newest.after) == ("rollback", second, first)
    with pytest.raises(NotFound):
        store.rollback("acme", 99, "admin:k3")


def test_a_stale_editor_gets_409(store: PolicyStore) -> None:
    store.set("acme", router.TenantPolicy(), "admin:a")
    store.set("acme", router.TenantPolicy(cache=False), "admin:b", expected_version=1)
    with pytest.raises(Conflict):
        store.set("acme", router.TenantPolicy(cache=True), "admin:a", expected_version=1)
    assert store.get("acme").policy.cache is False


def test_an_invalid_policy_is_refused_and_nothing_is_stored(store: PolicyStore) -> None:
    with pytest.raises(InvalidRequest) as caught:
        store.set("acme", router.TenantPolicy(preferred_tier="moon"), "admin:a")
    assert caught.value.param == "preferred_tier" and caught.value.status == 400
    assert store.history("acme") == [] and store.get("acme").version == 0


async def test_another_instance_sees_a_change_within_its_refresh(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.sqlite'}"
    one = PolicyBook(PolicyStore(open_database(url), router.DEFAULT_POLICY, TIERS), refresh_s=0.05)
    two = PolicyBook(PolicyStore(open_database(url), router.DEFAULT_POLICY, TIERS), refresh_s=0.05)
    await one.start()
    await two.start()
    try:
        await one.set("acme", router.TenantPolicy(strategy="always-cloud"), "admin:a")
        assert one.policy("acme").strategy == "always-cloud"  # at once where it was made
        for _ in range(100):
            if two.policy("acme").strategy == "always-cloud":
                break
            await asyncio.sleep(0.02)
        assert two.policy("acme").strategy == "always-cloud"
        assert two.policy("other").strategy == "learned"
    finally:
        await one.aclose()
        await two.aclose()


def test_policies_on_postgresql(postgres_url: str) -> None:
    store = PolicyStore(open_database(postgres_url), router.DEFAULT_POLICY, TIERS)
    try:
        store.set("pg-tenant", router.TenantPolicy(quality_floor=0.5), "admin:a")
        store.set("pg-tenant", router.TenantPolicy(quality_floor=0.7), "admin:a")
        assert store.rollback("pg-tenant", 1, "admin:b").policy.quality_floor == 0.5
        assert [c.version for c in store.history("pg-tenant")] == [3, 2, 1]
    finally:
        store.engine.dispose()  # PostgreSQL's shutdown waits for open connections
