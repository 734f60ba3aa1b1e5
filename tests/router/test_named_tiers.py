"""Tiers by name: three tiers called tiny, small and big (none is edge or cloud), chosen among by
the tenant's policy (preferred tier, latency objective, budget, quality), by the size rule and the
always:<tier> strategies, and pinned by name; and the decision is a pure function of its inputs."""

from __future__ import annotations

import dataclasses

import pytest

import router
from tests.router.routing import route
from tiers import Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})
IMAGE = frozenset({Modality.TEXT, Modality.IMAGE})
ALL = frozenset({Modality.TEXT, Modality.IMAGE, Modality.VIDEO})
PRICES = {
    "tiny": router.TierPrice(prompt_per_1k=0.00001, completion_per_1k=0.00002),
    "small": router.TierPrice(prompt_per_1k=0.0001, completion_per_1k=0.0003),
    "big": router.TierPrice(prompt_per_1k=0.001, completion_per_1k=0.003),
}
Kind = router.ReasonKind


def tiers(health: dict[str, Health] | None = None) -> list[router.TierView]:
    health = health or {}
    made = []
    for name, quality, modalities in (("tiny", 0.2, TEXT), ("small", 0.5, IMAGE), ("big", 0.9, ALL)):
        caps = Capabilities(modalities, 8192, f"{name}-model", quality=quality)
        made.append(router.TierView(name, caps, TierState(name, health.get(name, Health.READY))))
    return made


def feats(
    max_tokens: int | None = 32, modalities=TEXT, pinned: str | None = None, **media
) -> router.Features:
    summary = router.MediaSummary(**media) if media else router.NO_MEDIA
    return router.Features(20, max_tokens, 1, modalities, False, summary, "acme", 12, "Say hello.", pinned)


def learner() -> router.Learner:
    """A learner that has seen each tier: tiny 0.2 s per token, small 0.03, big 0.01."""
    taught = router.Learner(PRICES, exploration=0.0)
    for name, seconds_per_token in (("tiny", 0.2), ("small", 0.03), ("big", 0.01)):
        views = [v for v in tiers() if v.name == name]
        for i in range(40):
            f = feats(max_tokens=16 + 16 * (i % 8))
            d = route(taught, name, views, f)
            taught.observe(d, name, 0.1, 0.1 + seconds_per_token * (f.max_tokens or 0), f.max_tokens)
    return taught


@pytest.fixture(scope="module")
def taught() -> router.Learner:
    return learner()


def policy(**kw) -> router.TenantPolicy:
    kw.setdefault("latency", router.LatencyObjective(total_ms=10_000))
    return router.TenantPolicy(**kw)


def test_the_latency_objective_picks_the_cheapest_tier_predicted_to_meet_it(taught: router.Learner) -> None:
    long = feats(max_tokens=200)  # tiny ~40 s, small ~6 s, big ~2 s
    d = route(taught, "tiergate-auto", tiers(), long, policy())
    assert (d.tier, d.reason.kind, d.strategy) == ("small", Kind.SLO, "learned")
    assert str(d.reason).startswith("small: p95 predicted ") and "< slo 10000ms" in str(d.reason)
    assert d.fallbacks[0] == "big"  # the next that meets it
    tight = route(
        taught, "tiergate-auto", tiers(), long, policy(latency=router.LatencyObjective(total_ms=3000))
    )
    assert (tight.tier, tight.reason.kind) == ("big", Kind.SLO)
    never = router.LatencyObjective(total_ms=100)
    d = route(taught, "tiergate-auto", tiers(), long, policy(latency=never))
    assert (d.tier, d.reason.kind) == ("big", Kind.SLO_UNMET)
    assert "no tier is predicted to meet the objective" in str(d.reason)


def test_the_preferred_tier_is_taken_while_it_meets_the_policy(taught: router.Learner) -> None:
    d = route(taught, "tiergate-auto", tiers(), feats(), policy(preferred_tier="big"))
    assert (d.tier, d.reason.kind) == ("big", Kind.PREFERRED) and "(preferred tier)" in str(d.reason)
    loose = router.LatencyObjective(total_ms=60_000)
    cheapest = route(taught, "tiergate-auto", tiers(), feats(), policy(latency=loose))
    assert (cheapest.tier, cheapest.reason.kind) == ("tiny", Kind.SLO)
    assert (
        route(taught, "tiergate-auto", tiers(), feats(), policy(latency=loose, preferred_tier="big")).tier
        == "big"
    )
    slow = route(taught, "tiergate-auto", tiers(), feats(max_tokens=200), policy(preferred_tier="tiny"))
    assert slow.tier == "small"  # the preferred tier would miss the objective


def test_quality_floors_leave_only_the_tiers_that_reach_them(taught: router.Learner) -> None:
    assert route(taught, "tiergate-auto", tiers(), feats(), policy(quality_floor=0.4)).tier == "small"
    assert route(taught, "tiergate-auto", tiers(), feats(), policy(quality_floor=0.6)).tier == "big"
    d = route(taught, "tiergate-auto", tiers(), feats(), policy(quality_floor=0.95))
    assert (d.tier, d.reason.kind) == ("big", Kind.QUALITY_UNMET)
    assert "no tier has quality >= 0.95" in str(d.reason)


def test_a_spent_budget_sends_to_the_cheapest_or_refuses(taught: router.Learner) -> None:
    spent = router.Spend(spent_usd=3.0, seconds_left=60)
    cheapest = policy(preferred_tier="big", budget=router.Budget(amount_usd=2.0))
    d = route(taught, "tiergate-auto", tiers(), feats(), cheapest, spent)
    assert (d.tier, d.fallbacks, d.reason.kind) == ("tiny", ("small", "big"), Kind.BUDGET)
    assert str(d.reason).startswith("tiny: budget spent ($3.0000 of $2 this month): cheapest, cost 0.")
    refuse = policy(budget=router.Budget(amount_usd=2.0, on_exhausted="refuse"))
    with pytest.raises(router.BudgetExhausted):
        route(taught, "tiergate-auto", tiers(), feats(), refuse, spent)


def test_a_pinned_request_goes_to_the_tier_it_names_or_nowhere(taught: router.Learner) -> None:
    d = route(taught, "small", tiers(), feats(), policy(preferred_tier="big"))
    assert (d.tier, d.fallbacks, str(d.reason), d.strategy) == (
        "small",
        (),
        "small: pinned by model name",
        "pinned",
    )
    assert d.snapshot is not None and set(d.snapshot.predictions) == {"small"}
    with pytest.raises(router.RequestDoesNotFit, match="tiny does not accept image"):
        route(taught, "tiny", tiers(), feats(modalities=IMAGE, images=1))
    with pytest.raises(router.NoTierAvailable, match="big is down"):
        route(taught, "big", tiers({"big": Health.DOWN}), feats())


def test_the_size_rule_sends_small_requests_to_the_least_model_and_the_rest_to_the_best() -> None:
    rule, decide = router.TenantPolicy(strategy="rule"), router.Router().decide
    small = decide(feats(max_tokens=32), tiers(), rule)
    assert (small.tier, small.fallbacks, str(small.reason)) == (
        "tiny",
        ("small", "big"),
        "tiny: prompt ~20 <= 512 tokens, max_tokens 32 <= 256",
    )
    large = decide(feats(max_tokens=1000), tiers(), rule)
    assert (large.tier, large.fallbacks, large.reason.kind) == ("big", ("small", "tiny"), Kind.SIZE)
    picture = decide(feats(modalities=IMAGE, images=1), tiers(), rule)
    assert (picture.tier, picture.fallbacks, str(picture.reason)) == (
        "small",
        ("big",),
        "small: tiny does not accept image",
    )
    assert picture.reason.kind is Kind.CAPABILITY
    down = decide(feats(max_tokens=1000), tiers({"big": Health.DOWN}), rule)
    assert (down.tier, str(down.reason), down.reason.kind) == (
        "small",
        "small: big is down",
        Kind.TIER_UNAVAILABLE,
    )


def test_always_names_any_tier() -> None:
    decide = router.Router().decide
    d = decide(feats(), tiers(), router.TenantPolicy(strategy="always:small"))
    assert (d.tier, d.fallbacks, str(d.reason), d.reason.kind) == (
        "small",
        ("tiny", "big"),
        "small: always-small strategy",
        Kind.POLICY,
    )
    d = decide(feats(modalities=IMAGE, images=1), tiers(), router.TenantPolicy(strategy="always:tiny"))
    assert str(d.reason) == "small: always-tiny strategy, but tiny cannot take it; tiny does not accept image"
    assert router.check_policy(router.TenantPolicy(strategy="always:big"), ["tiny", "small", "big"])
    with pytest.raises(router.PolicyInvalid):
        router.check_policy(router.TenantPolicy(strategy="always:edge"), ["tiny", "small", "big"])
    older = decide(feats(), tiers(), router.TenantPolicy(strategy="always-edge"))  # stored before, still read
    assert str(older.reason) == "tiny: always-edge strategy, but edge cannot take it"


def test_deciding_changes_nothing_and_the_same_inputs_give_the_same_decision() -> None:
    learned = learner()
    views, f = tiers(), feats(max_tokens=200)
    for strategy in ("learned", "round-robin", "rule", "always:big"):
        p = policy(strategy=strategy)
        snapshot = learned.snapshot(f, views, p)
        saved, pending = learned.dump(), {t: learned.work.pending(t) for t in PRICES}
        decisions = [router.Router().decide(f, views, p, snapshot) for _ in range(3)]
        assert decisions[0] == decisions[1] == decisions[2]
        assert {**learned.dump(), "saved_at": 0} == {**saved, "saved_at": 0}
        assert {t: learned.work.pending(t) for t in PRICES} == pending
        learned.routed(decisions[0])  # the learner books it, not decide
        assert learned.work.pending(decisions[0].tier) == pending[decisions[0].tier] + 1
    # Round-robin's turn and exploration's draw come in the snapshot.
    rr = policy(strategy="round-robin")
    turns = [router.Router().decide(f, views, rr, learned.snapshot(f, views, rr)).tier for _ in range(3)]
    assert sorted(turns) == ["big", "small", "tiny"]
    snapshot = learned.snapshot(f, views, policy())
    explored = dataclasses.replace(snapshot, explore=0.0, exploration=0.1, unmeasured=frozenset({"big"}))
    d = router.Router().decide(f, views, policy(), explored)
    assert (d.tier, d.reason.kind) == ("big", Kind.EXPLORATION)
    assert str(d.reason).startswith(
        "big: exploring (10% of requests keep every tier measured): p50 predicted "
    )


def test_a_policys_fallbacks_are_tried_in_its_order_and_only_those_able() -> None:
    decide = router.Router().decide
    p = router.TenantPolicy(strategy="always:tiny", fallbacks=("big", "small"))
    d = decide(feats(), tiers(), p)
    assert (d.tier, d.fallbacks) == ("tiny", ("big", "small"))
    d = decide(feats(), tiers({"big": Health.DOWN}), p)  # big cannot take it now: not a fallback
    assert (d.tier, d.fallbacks) == ("tiny", ("small",))
    only = router.TenantPolicy(strategy="always:big", fallbacks=("tiny",))
    assert decide(feats(), tiers(), only).fallbacks == ("tiny",)  # small is not named: not tried
    names = ["tiny", "small", "big"]
    with pytest.raises(router.PolicyInvalid, match="no tier named 'gpt'") as bad:
        router.check_policy(router.TenantPolicy(fallbacks=("gpt",)), names)
    assert bad.value.field == "fallbacks.0"
    with pytest.raises(router.PolicyInvalid, match="twice"):
        router.check_policy(router.TenantPolicy(fallbacks=("tiny", "tiny")), names)
