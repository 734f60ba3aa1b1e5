"""The router's view of a batching tier: with a slot free a request starts at once and only its
tokens come slower (by the slowdown the tier measured); with every slot taken it waits for the
first to free up; a one-slot tier is predicted as before."""

from __future__ import annotations

import random

import pytest

import router
from router._learning.predictor import Coefficients
from router._learning.work import WorkBook
from tests.router.routing import route
from tiers import Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})
NAMES = router.FEATURE_NAMES
PER_TOKEN_S = 0.02  # the fake tier's seconds per generated token, alone
SERVICE_S = 0.5  # ... and its fixed part


def fitted_edge(clock: list[float]) -> router.Learner:
    """A learner whose edge takes 0.5 s + 20 ms per output token alone, + 1 s per second of wait."""
    learner = router.Learner({}, clock=lambda: clock[0], exploration=0.0)
    coefs = [0.0] * len(NAMES)
    coefs[NAMES.index("one")] = SERVICE_S
    coefs[NAMES.index("out_k")] = coefs[NAMES.index("out_k_x_batch")] = PER_TOKEN_S * 1000
    coefs[NAMES.index("busy_s")] = coefs[NAMES.index("ahead_s")] = 1.0
    learner.predictor("edge").adopt(Coefficients(ttft=[coefs, coefs], total=[coefs, coefs]))
    return learner


def edge(in_flight: int = 0, queued: int = 0, slots: int = 0, slowdown: float = 1.0) -> router.TierView:
    caps = Capabilities(TEXT, 4096, "edge-model")
    state = TierState("edge", Health.READY, in_flight, queued, slots=slots, slowdown=slowdown)
    return router.TierView("edge", caps, state)


LONG = router.Features(20, 500, 1, TEXT, False)  # 500 tokens: 10.5 s alone
SHORT = router.Features(20, 50, 1, TEXT, False)  # 50 tokens: 1.5 s alone


def test_a_batched_edge_with_a_free_slot_predicts_no_wait_only_slower_tokens() -> None:
    clock = [0.0]
    learner = fitted_edge(clock)
    for running in range(3):  # three long generations join the batch one after the other
        route(learner, "edge", [edge(running, slots=4)], LONG)
    clock[0] = 1.0
    d = route(learner, "edge", [edge(3, slots=4, slowdown=1.6)], SHORT)
    assert d.snapshot is not None
    x = dict(zip(NAMES, d.snapshot.vectors["edge"], strict=True))
    assert x["busy_s"] == 0.0 and x["ahead_s"] == 0.0  # it does not wait for the three
    tokens = 50 * d.snapshot.output_share
    # Its own tokens come 1.6x slower: the batch column adds 0.6 of them at the per-token cost.
    assert x["out_k_x_batch"] == pytest.approx(x["out_k"] * 0.6)
    assert d.snapshot.predictions["edge"].total_p50 == pytest.approx(SERVICE_S + tokens * PER_TOKEN_S * 1.6)
    assert not d.snapshot.queues["edge"]
    # Without the slot count the same three running would be waited for (the longest: ~9.5 s).
    blind = fitted_edge(clock := [0.0])
    for running in range(3):
        route(blind, "edge", [edge(running)], LONG)
    clock[0] = 1.0
    d = route(blind, "edge", [edge(3)], SHORT)
    assert d.snapshot is not None
    busy = dict(zip(NAMES, d.snapshot.vectors["edge"], strict=True))["busy_s"]
    assert busy > 5.0


def test_a_full_batched_edge_predicts_the_wait_for_the_first_slot_to_free() -> None:
    book = WorkBook()
    for service in (10.0, 4.0, 7.0, 9.0):  # four running, begun at 0 s, the second done at 4 s
        book.add("edge", service, now=0.0, wait=(0.0, 0.0), queues=False)
    assert book.queues("edge", 4, 0, slots=4)
    assert book.wait("edge", 4, 0, now=1.0, mean_service_s=2.0, slots=4) == (3.0, 0.0)
    # Two queued ahead (6 s and 2 s of service) are served four at a time once slots free up.
    book.add("edge", 6.0, now=1.0, wait=(3.0, 0.0), queues=True)
    book.add("edge", 2.0, now=1.0, wait=(3.0, 1.5), queues=True)
    assert book.wait("edge", 4, 2, now=2.0, mean_service_s=2.0, slots=4) == (2.0, 2.0)
    # A slot free: no wait, whatever the others have left.
    assert book.wait("edge", 3, 0, now=2.0, mean_service_s=2.0, slots=4) == (0.0, 0.0)
    # Requests it did not route count as the mean service time, the first of them to finish.
    assert WorkBook().wait("edge", 4, 3, now=0.0, mean_service_s=2.0, slots=4) == (2.0, 1.5)


def test_when_the_measured_slots_fall_below_the_running_a_request_waits_for_enough_to_finish() -> None:
    # Four running (10, 4, 7 and 9 s, begun at 0 s) and the batch now measured to sustain two: a
    # slot frees up once three have finished (at 9 s), not when the first does (at 4 s).
    book = WorkBook()
    for service in (10.0, 4.0, 7.0, 9.0):
        book.add("edge", service, now=0.0, wait=(0.0, 0.0), queues=False)
    assert book.queues("edge", 4, 0, slots=2)
    assert book.wait("edge", 4, 0, now=1.0, mean_service_s=2.0, slots=2) == (8.0, 0.0)
    assert book.wait("edge", 4, 0, now=1.0, mean_service_s=2.0, slots=1) == (9.0, 0.0)  # the last
    assert book.wait("edge", 4, 0, now=1.0, mean_service_s=2.0, slots=3) == (6.0, 0.0)


def test_the_full_batched_edge_in_the_router_waits_and_its_tokens_come_at_the_full_width() -> None:
    clock = [0.0]
    learner = fitted_edge(clock)
    services = []
    for running in range(4):  # four long generations fill the batch, each starting at once
        d = route(learner, "edge", [edge(running, slots=4)], LONG)
        assert d.snapshot is not None and not d.snapshot.queues["edge"]
        services.append(d.snapshot.predictions["edge"].total_p50)
    clock[0] = 2.0
    d = route(learner, "edge", [edge(4, slots=4, slowdown=2.0)], SHORT)
    assert d.snapshot is not None and d.snapshot.queues["edge"]
    x = dict(zip(NAMES, d.snapshot.vectors["edge"], strict=True))
    assert x["busy_s"] == pytest.approx(min(services) - 2.0) and x["ahead_s"] == 0.0
    assert x["out_k_x_batch"] == pytest.approx(x["out_k"])  # then decoded at twice the time per token


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_one_slot_tier_is_predicted_as_before(seed: int) -> None:
    """A serial edge says one slot: its waits are those of the book that learned one slot."""
    rng = random.Random(seed)
    said, learned = WorkBook(), WorkBook()
    now = 0.0
    for _ in range(40):
        now += rng.uniform(0.0, 3.0)
        in_flight, queued = rng.choice((0, 1)), rng.randint(0, 4)
        service = rng.uniform(0.5, 10.0)
        a = said.wait("edge", in_flight, queued, now, 2.0, slots=1)
        b = learned.wait("edge", in_flight, queued, now, 2.0)
        assert a == pytest.approx(b)
        assert said.queues("edge", in_flight, queued, 1) == learned.queues("edge", in_flight, queued)
        said.add("edge", service, now, a, said.queues("edge", in_flight, queued, 1))
        learned.add("edge", service, now, b, learned.queues("edge", in_flight, queued))


def test_the_fit_learns_seconds_per_token_alone_and_the_batch_column_shares_it() -> None:
    """A tier whose tokens take 20 ms alone and slowdown times that in a batch: the fit finds the
    20 ms from every request, batched or not, and predicts a batched one at its slowdown."""
    rng = random.Random(4)
    rows = []
    for _ in range(300):
        f = router.Features(rng.randint(10, 400), rng.choice((32, 64, 128, 256)), 1, TEXT, False)
        slowdown = rng.choice((1.0, 1.0, 1.4, 2.0))
        x = router.design(f, TierState("edge", Health.READY, slots=4, slowdown=slowdown), 1.0)
        tokens = f.max_tokens or 0
        total = (SERVICE_S + tokens * PER_TOKEN_S * slowdown) * rng.uniform(0.95, 1.05)
        rows.append([list(x), None, total, None, None, tokens])
    fitted = router.fit_tier(rows, {"min_samples": 16})
    for coefs in fitted["total"]:
        c = dict(zip(NAMES, coefs, strict=True))
        assert c["out_k_x_batch"] == c["out_k"]
    median = dict(zip(NAMES, fitted["total"][0], strict=True))
    assert median["out_k"] / 1000 == pytest.approx(PER_TOKEN_S, rel=0.1)
    assert fitted["metrics"]["total_holdout_mape"] < 0.06


def test_the_other_tiers_load_is_not_extrapolated_past_what_the_model_was_fitted_on() -> None:
    """The cloud's backlog (30 requests queued in vLLM on its own core) must not read as an edge
    ten times slower than the 3 cloud requests the calibration measured beside it."""
    rng = random.Random(5)
    rows = []
    for _ in range(200):
        f = router.Features(rng.randint(10, 400), rng.choice((32, 64, 128)), 1, TEXT, False)
        others = float(rng.randint(0, 3))
        x = router.design(f, TierState("edge", Health.READY), 1.0, others_load=others)
        tokens = f.max_tokens or 0
        rows.append(
            [list(x), None, SERVICE_S + tokens * PER_TOKEN_S * (1 + 0.3 * others), None, None, tokens]
        )
    learner = router.Learner({}, clock=lambda: 0.0)
    learner.adopt("edge", router.fit_tier(rows, {"min_samples": 16}))
    f = router.Features(20, 64, 1, TEXT, False)
    edge_view = edge(slots=4)
    cloud = router.TierView("cloud", edge_view.capabilities, TierState("cloud", Health.READY, 3))
    backlog = router.TierView("cloud", edge_view.capabilities, TierState("cloud", Health.READY, 30))
    at_3 = learner.snapshot(f, [edge_view, cloud], router.DEFAULT_POLICY).predictions["edge"]
    at_30 = learner.snapshot(f, [edge_view, backlog], router.DEFAULT_POLICY).predictions["edge"]
    assert at_30.total_hi == pytest.approx(at_3.total_hi) and at_30.total_p50 == pytest.approx(at_3.total_p50)
    assert at_30.per_token_s == pytest.approx(at_3.per_token_s)
    alone = learner.snapshot(f, [edge_view], router.DEFAULT_POLICY).predictions["edge"]
    assert at_3.total_p50 > alone.total_p50 * 1.2  # within what it was fitted on, the slowdown holds
    # A learner loaded from its file keeps the bound.
    again = router.Learner({}, clock=lambda: 0.0)
    again.load(learner.dump())
    assert again.snapshot(f, [edge_view, backlog], router.DEFAULT_POLICY).predictions["edge"].total_p50 == (
        pytest.approx(at_3.total_p50)
    )
