"""The learner off the request path: :meth:`RoutingService.observe` queues what a request took, and
the learner learns it when the queue is folded (in the background, or :meth:`fold_now`), in a
bounded queue, to the same state as observing the requests one by one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import router
from gateway.pipeline import routing_service as routing_module
from gateway.pipeline.routing_service import RoutingService
from gateway.settings import RouterSettings
from tests.router.routing import AUTO, route
from tiers import Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})
PRICES = {
    "edge": router.TierPrice(prompt_per_1k=0.00002, completion_per_1k=0.00004),
    "cloud": router.TierPrice(prompt_per_1k=0.0005, completion_per_1k=0.0015),
}
VIEWS = [
    router.TierView(name, Capabilities(TEXT, 4096, f"{name}-model", quality=q), TierState(name, Health.READY))
    for name, q in (("edge", 0.4), ("cloud", 0.7))
]
WORDS = ["Say hello.", "Prove that there are infinitely many primes.", "Translate 'cat' to French."]


def features(i: int) -> router.Features:
    text = WORDS[i % len(WORDS)]
    return router.Features.estimate(
        text_chars=len(text),
        turns=1,
        max_tokens=16 * (1 + i % 5),
        modalities=TEXT,
        stream=i % 2 == 0,
        text=text,
    )


def served(i: int, decision: router.Decision) -> tuple[Any, ...]:
    """What request ``i`` took at the tier it was routed to: (tier, ttft, total, completion, prompt)."""
    return decision.tier, 0.05 + 0.01 * (i % 3), 0.2 + 0.03 * (i % 7), 4 + i % 11, 12 + 3 * (i % 4)


def service(tmp_path: Path) -> RoutingService:
    return RoutingService(
        RouterSettings(exploration=0.0),
        router.AutoRule(),
        PRICES,
        tmp_path,
        policy_of=lambda _t: router.DEFAULT_POLICY,
    )


def learned(learner: router.Learner) -> dict[str, Any]:
    dump = learner.dump()
    del dump["saved_at"]
    dump["token_weights"] = {tier: c.weights for tier, c in learner.tokens.tiers.items()}
    return dump


def test_observe_queues_and_the_learner_learns_only_when_the_queue_is_folded(tmp_path: Path) -> None:
    routing = service(tmp_path)
    decision = routing.decide(VIEWS, features(0))
    assert routing.learner.work.pending(decision.tier) == 1
    before = learned(routing.learner)
    routing.observe(decision, *served(0, decision))
    assert learned(routing.learner) == before  # predictors, output share, token calibration untouched
    assert routing.learner.work.pending(decision.tier) == 0  # out of the book of work in hand at once
    assert routing.fold_now() == 1 and routing.fold_now() == 0
    assert len(routing.learner.predictors[decision.tier].window) == 1
    assert routing.learner.output.updates == 1


def test_the_queue_is_bounded_dropping_the_oldest_and_counting_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routing_module, "OBSERVATIONS_HELD", 5)
    routing = service(tmp_path)
    decisions = [routing.decide(VIEWS, features(i)) for i in range(8)]
    for i, decision in enumerate(decisions):
        routing.observe(decision, *served(i, decision))
    assert routing.dropped == 3
    assert routing.fold_now() == 5
    window = routing.learner.predictors[decisions[0].tier].window
    assert [o.total for o in window] == [served(i, decisions[i])[2] for i in range(3, 8)]  # the newest
    assert routing.report()["observations"] == {"dropped": 3}


def test_folded_batches_learn_what_observing_one_by_one_learns(tmp_path: Path) -> None:
    """Rounds of requests routed, then ended in another order: one learner observes each as it
    ends, the other queues them and folds each round's at its end."""
    one_by_one = router.Learner(PRICES, exploration=0.0)
    queued = service(tmp_path)
    for start in range(0, 120, 8):
        rounds = range(start, start + 8)
        singly = [route(one_by_one, AUTO, VIEWS, features(i)) for i in rounds]
        batched = [queued.decide(VIEWS, features(i)) for i in rounds]
        assert [d.tier for d in singly] == [d.tier for d in batched]
        for i in reversed(rounds):
            one_by_one.observe(singly[i - start], *served(i, singly[i - start]))
            queued.observe(batched[i - start], *served(i, batched[i - start]))
        queued.fold_now()
    assert learned(queued.learner) == learned(one_by_one)
    # The prompt tokens were calibrated (solved once per batch) and are in use.
    assert all(c.samples >= queued.learner.tokens.min_samples for c in queued.learner.tokens.tiers.values())
    assert queued.learner.work.pending("edge") == one_by_one.work.pending("edge") == 0


async def test_the_background_fold_learns_beside_requests_and_closing_drains_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(routing_module, "load_difficulty", lambda *_: None)  # no training here
    routing = service(tmp_path)
    await routing.start()
    try:
        decision = routing.decide(VIEWS, features(0))
        routing.observe(decision, *served(0, decision))
        window = routing.learner.predictors[decision.tier].window
        assert not window
        for _ in range(100):
            await asyncio.sleep(routing_module.FOLD_AFTER_S / 2)
            if window:
                break
        assert len(window) == 1
        again = routing.decide(VIEWS, features(1))
        routing.observe(again, *served(1, again))
    finally:
        await routing.aclose()
    assert len(routing.learner.predictors[again.tier].window) == 1 + (again.tier == decision.tier)
    saved = json.loads((tmp_path / "router" / routing_module.PREDICTOR_FILE).read_text())
    assert sum(len(t["window"]) for t in saved["tiers"].values()) == 2  # folded before the save
