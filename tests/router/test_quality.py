"""The quality model (router/_learning/quality.py): it learns each tier's acceptability from labels,
per tenant over a shared prior that learns from each tenant's first labels only; a tenant's own labels
covering a request decide when it replaces the declared quality; the learned strategy explores a
cheaper tier it has not learned yet, and says what it learned and which tier that left out."""

from __future__ import annotations

import dataclasses
import random

import router
from tests.router.routing import AUTO, route
from tiers import Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})
PRICES = {
    "edge": router.TierPrice(prompt_per_1k=0.00002, completion_per_1k=0.0001),
    "cloud": router.TierPrice(prompt_per_1k=0.0005, completion_per_1k=0.0015),
}
NO_OBJECTIVE = router.LatencyObjective(total_ms=None)
POLICY = router.TenantPolicy(latency=NO_OBJECTIVE, weigh_difficulty=False)


def views() -> list[router.TierView]:
    caps = {n: Capabilities(TEXT, 4096, f"{n}-model", quality=q) for n, q in (("edge", 0.4), ("cloud", 0.7))}
    return [router.TierView(n, caps[n], TierState(n, Health.READY)) for n in ("edge", "cloud")]


def features(text: str, tenant: str = "t") -> router.Features:
    return router.Features.estimate(
        text_chars=len(text), turns=1, max_tokens=64, modalities=TEXT, stream=False, tenant=tenant, text=text
    )


FACT = "Which ocean lies west of Chile?"
PUZZLE = "Pipe A fills a tank in 3 hours and pipe B drains it in 5 hours; when is it full? Reason it out."


def keys(text: str) -> router.QualityKeys:
    return router.quality_keys(features(text), None)


def teach(model: router.QualityModel, tier: str, text: str, rate: float, n: int, tenant: str = "t") -> None:
    rng = random.Random(7)
    for _ in range(n):
        model.label(tenant, tier, keys(text), rng.random() < rate)


def test_it_converges_to_each_kind_of_requests_acceptability() -> None:
    model = router.QualityModel()
    rng = random.Random(1)
    for _ in range(200):
        text, rate = (FACT, 0.95) if rng.random() < 0.5 else (PUZZLE, 0.2)
        model.label("t", "edge", keys(text), rng.random() < rate)
    fact = model.assess("t", "edge", 0.4, keys(FACT), rng)
    puzzle = model.assess("t", "edge", 0.4, keys(PUZZLE), rng)
    assert fact.mean > 0.85 and puzzle.mean < 0.35, (fact, puzzle)
    assert fact.labels == puzzle.labels == 200


def test_before_labels_the_prior_is_the_declared_quality_against_the_difficulty() -> None:
    model = router.QualityModel()
    rng = random.Random(1)
    easy = router.quality_keys(features(FACT), 0.1)
    hard = router.quality_keys(features(FACT), 0.9)
    # edge 0.4: likely acceptable for an easy request, unlikely for a hard one; not learned either way
    low, high = model.assess("t", "edge", 0.4, hard, rng), model.assess("t", "edge", 0.4, easy, rng)
    assert low.mean < 0.3 < 0.6 < high.mean
    assert not low.learned and not high.learned and low.labels == 0


def test_its_own_labels_covering_the_request_gate_the_switch_from_the_declared_quality() -> None:
    model = router.QualityModel(router.QualityConfig(min_labels=30))
    rng = random.Random(1)
    teach(model, "edge", FACT, 0.95, 20)
    assert not model.assess("t", "edge", 0.4, keys(FACT), rng).learned  # too few labels
    teach(model, "edge", FACT, 0.95, 40)
    seen = model.assess("t", "edge", 0.4, keys(FACT), rng)
    unseen = model.assess("t", "edge", 0.4, keys("Compose a sonnet about glaciers melting slowly"), rng)
    assert seen.learned and seen.coverage == 1.0 and seen.sd < unseen.sd
    assert not unseen.learned and unseen.coverage == 0.0  # words it never had a label for: declared
    # Another tenant's 60 labels are not its own: its figure is the prior's, never learned.
    other = model.assess("u", "edge", 0.4, keys(FACT), rng)
    assert not other.learned and (other.labels, other.shared) == (0, 20)


def test_a_tenants_labels_are_its_own_over_the_shared_prior() -> None:
    model = router.QualityModel()
    rng = random.Random(1)
    teach(model, "edge", FACT, 0.95, 60, tenant="a")
    shared = model.assess("b", "edge", 0.4, keys(FACT), rng)  # b has no labels: the shared prior
    before = router.QualityModel().assess("b", "edge", 0.4, keys(FACT), rng)
    assert shared.mean > before.mean and shared.labels == 0 and not shared.learned
    teach(model, "edge", FACT, 0.0, 60, tenant="b")
    assert (
        model.assess("b", "edge", 0.4, keys(FACT), rng).mean
        < model.assess("a", "edge", 0.4, keys(FACT), rng).mean
    )


def test_the_shared_prior_learns_from_each_tenants_first_labels_only() -> None:
    """One tenant's 20 labels (``shared_labels``) move the shared prior; its 280 more move nothing of it,
    and another tenant's 40 good labels of its own decide that tenant's figure."""
    model = router.QualityModel()
    rng = random.Random(1)
    prior = model.assess("b", "edge", 0.4, keys(FACT), rng).mean
    teach(model, "edge", FACT, 0.0, 20, tenant="a")
    after_20 = model.assess("b", "edge", 0.4, keys(FACT), rng)
    teach(model, "edge", FACT, 0.0, 280, tenant="a")
    after_300 = model.assess("b", "edge", 0.4, keys(FACT), rng)
    assert after_20.mean < prior and after_300.mean == after_20.mean and after_300.shared == 20
    assert not after_300.learned  # no label of its own
    (a,) = model.report("a")
    assert (a["labels"], a["shared"]) == (300, 20)
    own = model.assess("a", "edge", 0.4, keys(FACT), rng)
    assert own.learned and own.mean < 0.1 and (own.labels, own.shared) == (300, 0)
    teach(model, "edge", FACT, 1.0, 40, tenant="b")
    clean = router.QualityModel()
    teach(clean, "edge", FACT, 1.0, 40, tenant="b")
    mine, unpoisoned = (m.assess("b", "edge", 0.4, keys(FACT), rng) for m in (model, clean))
    assert mine.learned and mine.mean > 0.85 and unpoisoned.mean - mine.mean < 0.05, (mine, unpoisoned)


def test_a_class_never_labelled_is_not_learned_from_another() -> None:
    """300 bad labels on one kind of request leave the tenant's other kinds to the declared quality."""
    model = router.QualityModel()
    rng = random.Random(1)
    teach(model, "edge", FACT, 0.0, 300)
    other = model.assess("t", "edge", 0.4, keys("Spell the word lamp backwards."), rng)
    assert not other.learned and other.coverage < 0.5
    assert model.assess("t", "edge", 0.4, keys(FACT), rng).learned


def test_the_router_sends_what_the_edge_fails_to_the_cloud_and_says_why() -> None:
    learner = router.Learner(PRICES, exploration=0.0, seed=3, quality=router.QualityConfig(min_labels=10))
    for tier, rate in (("edge", 0.1), ("cloud", 0.95)):
        for i in range(40):
            learner.label([("t", tier, keys(PUZZLE), random.Random(i).random() < rate, 0.0)])
    decision = route(learner, AUTO, views(), features(PUZZLE), POLICY)
    assert decision.tier == "cloud"
    text = decision.reason.render()
    assert text.startswith("cloud: acceptable 0.9") and ">= floor 0.7 (40 own labels, 0 shared); " in text
    # The edge meets the policy on its declared quality and is cheaper: what was learned left it out.
    assert "; edge not taken: acceptable 0.0" in text and "< floor 0.7 (40 own labels, 0 shared); " in text
    for i in range(40):
        learner.label([("t", "edge", keys(FACT), random.Random(i).random() < 0.97, 0.0)])
    easy = route(learner, AUTO, views(), features(FACT), POLICY)
    assert easy.tier == "edge" and easy.reason.render().startswith("edge: acceptable 0.9"), easy.reason
    assert "not taken" not in easy.reason.render()


def test_another_tenants_labels_show_in_no_reason_of_a_tenant_without_its_own() -> None:
    learner = router.Learner(PRICES, exploration=0.0, seed=3)
    learner.label([("a", "edge", keys(FACT), False, 0.0)] * 100)
    theirs = route(learner, AUTO, views(), features(FACT, tenant="b"), POLICY)
    mine = route(learner, AUTO, views(), features(FACT, tenant="a"), POLICY)
    assert theirs.tier == "edge" and "acceptable" not in theirs.reason.render(), theirs.reason
    assert mine.tier == "cloud" and mine.reason.render().startswith(
        "cloud: edge not taken: acceptable 0.0"
    ), mine.reason
    assert "(100 own labels, 0 shared)" in mine.reason.render()


def measured(learner: router.Learner, policy: router.TenantPolicy) -> router.Decision:
    """A decision for PUZZLE with every tier measured lately: only quality can make it explore."""
    snapshot = learner.snapshot(features(PUZZLE), views(), policy)
    snapshot = dataclasses.replace(snapshot, unmeasured=frozenset())
    return router.Router().decide(features(PUZZLE), views(), policy, snapshot)


def test_exploration_tries_a_cheaper_tier_not_learned_yet() -> None:
    hard = router.DifficultyModel(coef=[0.0] * (4096 + 6), intercept=5.0)  # every request is hard
    config = router.QualityConfig(min_labels=10)
    learner = router.Learner(PRICES, exploration=1.0, seed=3, quality=config, difficulty=hard)
    policy = router.TenantPolicy(latency=NO_OBJECTIVE, quality_floor=0.5)  # the edge's 0.4 is below it
    assert {measured(learner, policy).tier for _ in range(20)} == {"cloud"}  # never explored
    policy = router.TenantPolicy(latency=NO_OBJECTIVE)
    decisions = [measured(learner, policy) for _ in range(20)]
    assert {d.tier for d in decisions} == {"edge"}  # declared too low for hard requests: explored
    assert all(d.reason.kind is router.ReasonKind.EXPLORATION for d in decisions)
    for i in range(60):  # once the edge is learned bad for these, no draw passes the floor
        learner.label([("t", "edge", keys(PUZZLE), i % 10 == 0, 0.0)])
    assert [measured(learner, policy).tier for _ in range(20)].count("edge") <= 1


def test_the_acceptance_text() -> None:
    assert (
        str(router.Acceptance(0.861, 0.8, 312, 40))
        == "acceptable 0.86 >= floor 0.8 (312 own labels, 40 shared)"
    )
    assert str(router.Acceptance(0.7, 0.8, 5)) == "acceptable 0.70 < floor 0.8 (5 own labels, 0 shared)"
    drawn = router.Acceptance(0.7, 0.8, 5, draw=0.83)
    assert str(drawn) == "acceptable 0.70 < floor 0.8 (5 own labels, 0 shared), drawn 0.83"


def test_what_it_learned_is_saved_and_loaded_with_the_learner() -> None:
    learner = router.Learner(PRICES, seed=1)
    learner.label([("t", "edge", keys(FACT), True, 3600.0 * 10)] * 5)
    again = router.Learner(PRICES, seed=1)
    again.load(learner.dump())
    rng = random.Random(0)
    before = learner.quality.assess("t", "edge", 0.4, keys(FACT), rng)
    after = again.quality.assess("t", "edge", 0.4, keys(FACT), random.Random(0))
    assert after == before
    (row,) = again.quality.report("t")
    assert (row["labels"], row["good"], row["hours"][0]["hour_start"]) == (5, 5, 36000.0)


def test_a_reason_names_no_difficulty_when_a_learned_figure_decided() -> None:
    """The difficulty is shown when a tier fell short of it on its declared quality, not when what was
    learned left a tier out (the difficulty was then no part of it)."""
    easy = router.DifficultyModel(coef=[0.0] * (4096 + 6), intercept=-3.0)  # every request is easy
    learner = router.Learner(PRICES, exploration=0.0, seed=3, difficulty=easy)
    learner.label([("t", "edge", router.quality_keys(features(FACT), 0.05), False, 0.0)] * 40)
    policy = router.TenantPolicy(latency=NO_OBJECTIVE)  # weighs the difficulty
    decision = route(learner, AUTO, views(), features(FACT), policy)
    text = decision.reason.render()
    assert decision.tier == "cloud" and text.startswith("cloud: edge not taken: acceptable 0.0"), text
    assert "difficulty" not in text


def test_the_shared_prior_and_each_tenants_count_are_saved() -> None:
    learner = router.Learner(PRICES, seed=1)
    learner.label([("a", "edge", keys(FACT), False, 0.0)] * 30)
    again = router.Learner(PRICES, seed=1)
    again.load(learner.dump())
    rng = random.Random(0)
    assert again.quality.assess("b", "edge", 0.4, keys(FACT), rng).shared == 20
    again.label([("a", "edge", keys(FACT), False, 0.0)])  # past its 20: the prior learns nothing of it
    assert again.quality.report("a")[0]["shared"] == 20
    # Saved before the prior was bounded (no format): its weights held every tenant's labels; not loaded.
    old = learner.dump()
    old["quality"].pop("format")
    for row in old["quality"]["tallies"]:
        del row[5:]
    fresh = router.Learner(PRICES, seed=1)
    fresh.load(old)
    a = fresh.quality.assess("a", "edge", 0.4, keys(FACT), rng)
    assert (a.labels, a.shared, a.learned) == (0, 0, False)
    (row,) = fresh.quality.report("a")
    assert (row["labels"], row["shared"]) == (30, 0)
