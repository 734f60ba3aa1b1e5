"""The router inside the chat service (in-process fake tiers): policies per tenant, learning from
served requests (TTFT from streams), the fallback order on a full queue; budgets from the ledger."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import router
from gateway.accounts.budgets import BudgetBook, period_bounds, spent_usd
from gateway.accounts.ledger import DEFAULT_PRICES, LedgerRow, insert_rows
from gateway.accounts.storage import open_database
from gateway.accounts.tenants import TenantLimits, TenantStore
from gateway.ops.metrics import Metrics
from gateway.pipeline.chat import ChatService, RequestContext
from gateway.pipeline.routing_service import (
    RouterSettings,
    RoutingService,
    builtin_difficulty,
    load_difficulty,
    tier_prices,
)
from gateway.wire.chat import parse_chat_request
from tests.pipeline import chat_service, complete, streamed
from tiers import (
    Capabilities,
    Event,
    Finished,
    Generation,
    Health,
    Modality,
    Started,
    TextDelta,
    TierOverloaded,
    TierState,
    Usage,
)


class Tier:
    def __init__(self, name: str, quality: float) -> None:
        self.name = name
        self.full = False
        self.calls = 0
        self._caps = Capabilities(frozenset({Modality.TEXT}), 4096, f"{name}-model", quality=quality)

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def state(self) -> TierState:
        return TierState(self.name, Health.READY)

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        if self.full:
            raise TierOverloaded(self.name, "the fast lane is full", retry_after_s=2)
        self.calls += 1
        yield Started(model=self._caps.model)
        yield TextDelta("h")
        yield TextDelta("i")
        yield Finished("stop", Usage(5, 2))


def body(stream: bool = False, max_tokens: int = 16, text: str = "Say hello.") -> bytes:
    return (
        b'{"model": "tiergate-auto", "max_tokens": %d, "stream": %s, "messages": [{"role": "user", "content": "%s"}]}'
        % (max_tokens, b"true" if stream else b"false", text.encode())
    )


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ChatService, RoutingService, Tier, Tier, dict[str, router.TenantPolicy]]:
    edge, cloud = Tier("edge", 0.4), Tier("cloud", 0.7)
    tiers = {"edge": edge, "cloud": cloud}
    settings = RouterSettings(exploration=0.0)
    policies: dict[str, router.TenantPolicy] = {}
    routing = RoutingService(
        settings,
        router.AutoRule(),
        tier_prices(DEFAULT_PRICES, tiers),
        tmp_path,
        policy_of=lambda t: policies.get(t, router.DEFAULT_POLICY),
    )
    routing.learner.difficulty = router.builtin_model()
    chat = chat_service(tiers, router.AutoRule(), Metrics(), routing=routing)
    return chat, routing, edge, cloud, policies


async def test_each_tenant_is_routed_by_its_own_policy(setup) -> None:
    chat, _, _, _, policies = setup
    policies["acme"] = router.TenantPolicy(strategy="always-cloud")
    routed, _ = await complete(chat, parse_chat_request(body()), "r1", RequestContext(tenant="acme"))
    assert (routed.tier, routed.reason) == ("cloud", "cloud: always-cloud strategy")
    routed, _ = await complete(chat, parse_chat_request(body()), "r2", RequestContext(tenant="other"))
    assert routed.tier == "edge" and "predicted" in routed.reason and routed.predicted.startswith("ttft=")


async def test_served_requests_are_learned_from_streams_with_their_ttft(setup) -> None:
    chat, routing, *_ = setup
    await complete(chat, parse_chat_request(body()), "r1", RequestContext())
    start = await streamed(chat, parse_chat_request(body(stream=True)), "r2", RequestContext())
    async for _ in start.events:
        pass
    edge = routing.learner.predictors["edge"]
    assert not edge.window  # queued, not learned on the request path
    assert routing.fold_now() == 2
    assert len(edge.window) == 2
    assert edge.window[0].ttft is None and edge.window[1].ttft is not None
    assert edge.window[1].ttft <= edge.window[1].total
    assert edge.completion_ratio != 0.6  # the 2 of 16 tokens used moved it


@pytest.mark.parametrize("stream", [False, True])
async def test_a_full_queue_moves_the_request_to_the_next_in_the_fallback_order(setup, stream: bool) -> None:
    chat, _, edge, cloud, _ = setup
    edge.full = True
    request = parse_chat_request(body(stream=stream))
    if stream:
        start = await streamed(chat, request, "r1", RequestContext())
        routed = start.routed
        async for _ in start.events:
            pass
    else:
        routed, _ = await complete(chat, request, "r1", RequestContext())
    assert routed.tier == "cloud" and cloud.calls == 1
    full = TierOverloaded("edge", "the fast lane is full", retry_after_s=2)
    assert routed.reason == f"cloud: {full}, failed over"  # why the edge did not serve


async def test_route_decisions_are_counted_by_strategy_and_the_reasons_kind(setup) -> None:
    chat, _, _, _, policies = setup
    policies["acme"] = router.TenantPolicy(strategy="always:cloud")
    await complete(chat, parse_chat_request(body()), "r1", RequestContext(tenant="acme"))
    await complete(chat, parse_chat_request(body()), "r2", RequestContext(tenant="other"))
    pinned = body().replace(b"tiergate-auto", b"edge")
    await complete(chat, parse_chat_request(pinned), "r3", RequestContext(tenant="other"))
    text = chat.metrics.render().decode()
    counted = {
        (s.labels["strategy"], s.labels["tier"], s.labels["reason_class"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "tiergate_route_decisions_total"
    }
    assert counted == {
        ("always:cloud", "cloud", "policy"): 1,
        ("learned", "edge", "slo"): 1,
        ("pinned", "edge", "pinned"): 1,
    }


def row(tenant_id: int, ts: float, cost_nusd: int, n: int) -> LedgerRow:
    return LedgerRow(
        entry_id=f"e{n}",
        request_id=f"r{n}",
        tenant_id=tenant_id,
        key_id="k",
        ts=ts,
        day="",
        model_asked="m",
        tier="cloud",
        model_used="m",
        route_reason="",
        prompt_tokens=1,
        completion_tokens=1,
        images=0,
        audio=0,
        video=0,
        ttft_ms=None,
        total_ms=1.0,
        cache_hit=False,
        degraded=False,
        status=200,
        error=None,
        price_id=None,
        cost_nusd=cost_nusd,
        counterfactual_nusd=cost_nusd,
    )


def test_period_bounds_are_utc_calendar_periods() -> None:
    now = dt.datetime(2026, 11, 26, 15, 30, tzinfo=dt.UTC).timestamp()  # a Thursday
    day = period_bounds("day", now)
    assert dt.datetime.fromtimestamp(day[0], dt.UTC) == dt.datetime(2026, 11, 26, tzinfo=dt.UTC)
    week = period_bounds("week", now)
    assert dt.datetime.fromtimestamp(week[0], dt.UTC) == dt.datetime(2026, 11, 23, tzinfo=dt.UTC)
    month = period_bounds("month", now)
    assert dt.datetime.fromtimestamp(month[1], dt.UTC) == dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


async def test_spend_comes_from_the_ledger_for_the_current_period(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    store = TenantStore(engine, TenantLimits())
    acme, other = store.create_tenant("acme"), store.create_tenant("other")
    now = dt.datetime(2026, 11, 26, 12, tzinfo=dt.UTC).timestamp()
    last_month = dt.datetime(2026, 10, 30, tzinfo=dt.UTC).timestamp()
    insert_rows(
        engine,
        [
            row(acme.id, now - 60, 2_000_000_000, 1),
            row(acme.id, last_month, 5_000_000_000, 2),
            row(other.id, now, 9_000_000_000, 3),
        ],
    )
    assert spent_usd(engine, "acme", period_bounds("month", now)[0]) == 2.0
    policy = router.TenantPolicy(budget=router.Budget(amount_usd=1.5, period="month"))
    book = BudgetBook(engine, lambda _t: policy, refresh_s=60, clock=lambda: now)
    assert book.spend("acme", policy) is None  # not read yet: noted for the next refresh
    await book.refresh()
    spend = book.spend("acme", policy)
    assert spend is not None and spend.spent_usd == 2.0 and 0 < spend.seconds_left <= 5 * 86400
    assert book.spend("acme", router.TenantPolicy()) is None  # no budget, nothing to check


def test_the_built_in_difficulty_model_is_trained_once_then_read_from_the_build_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trained = builtin_difficulty(tmp_path / "router")
    [kept] = (tmp_path / "router").glob("difficulty-builtin-*.json")
    assert trained.source == "built-in" and trained.coef

    def no_training() -> router.DifficultyModel:
        raise AssertionError("trained again although the build cache holds the model")

    monkeypatch.setattr(router, "builtin_model", no_training)
    assert builtin_difficulty(tmp_path / "router") == trained
    kept.write_text("{not json")  # a damaged file is trained over, not an error
    monkeypatch.undo()
    again = builtin_difficulty(tmp_path / "router")
    assert again.coef == trained.coef and again.trained_at > trained.trained_at
    assert builtin_difficulty(tmp_path / "router") == again  # and kept again


def test_an_unwritable_build_cache_only_costs_the_training(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    model = builtin_difficulty(blocked / "router")
    assert model.source == "built-in" and model.coef
    assert load_difficulty(tmp_path / "no-router-folder", blocked / "router").coef == model.coef
