"""The work each tier has in hand: a new request's wait is the predicted time left of the
requests ahead of it, not their count × a mean service time; and exploration leaves alone a
tier that is measured anyway."""

from __future__ import annotations

import pytest

import router
from router._learning.predictor import Coefficients
from router._learning.work import WorkBook
from tests.router.routing import route
from tiers import Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})


def test_the_wait_behind_a_request_about_to_finish_is_short() -> None:
    book = WorkBook()
    book.add("edge", 10.0, now=0.0, wait=(0.0, 0.0), queues=False)  # a long generation: 10 s
    assert book.wait("edge", 1, 0, now=1.0, mean_service_s=3.0) == (9.0, 0.0)  # just started
    assert book.wait("edge", 1, 0, now=8.0, mean_service_s=3.0) == (2.0, 0.0)  # almost done
    # Past its predicted finish it is still running: a tenth of its prediction is assumed left.
    assert book.wait("edge", 1, 0, now=12.0, mean_service_s=3.0) == (1.0, 0.0)


def test_queued_requests_add_their_service_times_and_start_when_the_work_ahead_drains() -> None:
    book = WorkBook()
    assert not book.queues("edge", 0, 0) and book.queues("edge", 1, 0)  # one slot until seen more
    book.add("edge", 4.0, now=0.0, wait=(0.0, 0.0), queues=False)  # served at once, done at 4 s
    book.add("edge", 6.0, now=1.0, wait=book.wait("edge", 1, 0, 1.0, 3.0), queues=True)  # starts at 4 s
    book.add("edge", 8.0, now=2.0, wait=book.wait("edge", 1, 1, 2.0, 3.0), queues=True)  # starts at 10 s
    assert book.wait("edge", 1, 2, now=3.0, mean_service_s=3.0) == (1.0, 14.0)
    # The first is done; the second began at 4 s (its predicted start), the third waits.
    assert book.wait("edge", 1, 1, now=5.0, mean_service_s=3.0) == (5.0, 8.0)


def test_a_long_queue_waits_the_sum_of_its_service_times_not_more() -> None:
    """Booking predicted totals (wait included) fed each wait back into the next: 20 queued
    requests reached 10^8 s in a replay.  Service times keep the wait linear in the queue."""
    book = WorkBook()
    for i in range(30):
        wait = book.wait("edge", min(i, 1), max(i - 1, 0), float(i) * 0.01, 1.0)
        book.add("edge", 1.0, now=i * 0.01, wait=wait, queues=book.queues("edge", min(i, 1), max(i - 1, 0)))
    busy, ahead = book.wait("edge", 1, 29, now=0.3, mean_service_s=1.0)
    assert busy == pytest.approx(0.7) and ahead == pytest.approx(29.0)


def test_the_tiers_counts_decide_how_many_requests_are_ahead() -> None:
    book = WorkBook()
    first = book.add("edge", 5.0, now=0.0, wait=(0.0, 0.0), queues=False)
    book.add("edge", 5.0, now=0.0, wait=(0.0, 0.0), queues=False)
    book.done("edge", first)
    assert book.pending("edge") == 1
    # An entry the router never heard back about (its request failed) is older than the tier's count.
    book.add("edge", 2.0, now=1.0, wait=(0.0, 0.0), queues=False)
    assert book.wait("edge", 1, 0, now=2.0, mean_service_s=3.0) == (1.0, 0.0)
    # Requests the router did not route itself count as the mean service time each.
    assert book.wait("cloud", 2, 1, now=2.0, mean_service_s=3.0) == (6.0, 3.0)
    assert book.wait("edge", 0, 0, now=2.0, mean_service_s=3.0) == (0.0, 0.0)
    # A tier seen serving two at once has two slots: a request that finds one busy starts at once.
    assert not book.queues("cloud", 1, 0) and book.queues("cloud", 2, 0)
    book.add("edge", 1.0, now=500.0, wait=(0.0, 0.0), queues=False)  # long-finished entries are forgotten
    assert book.pending("edge") == 1


def views(edge_in_flight: int = 0) -> list[router.TierView]:
    caps = {n: Capabilities(TEXT, 4096, f"{n}-model", quality=q) for n, q in (("edge", 0.4), ("cloud", 0.7))}
    return [
        router.TierView("edge", caps["edge"], TierState("edge", Health.READY, edge_in_flight)),
        router.TierView("cloud", caps["cloud"], TierState("cloud", Health.READY)),
    ]


def test_the_router_books_what_it_sends_and_feeds_the_wait_to_the_predictor() -> None:
    clock = [100.0]
    r = router.Learner({}, clock=lambda: clock[0])
    f = router.Features(20, 64, 1, TEXT, True)
    first = route(r, "edge", views(), f, router.DEFAULT_POLICY)
    assert first.snapshot is not None and r.work.pending("edge") == 1
    predicted = first.snapshot.predictions["edge"].total_p50  # nothing ahead: its service time
    clock[0] += predicted / 2
    second = route(r, "edge", views(edge_in_flight=1), f, router.DEFAULT_POLICY)
    assert second.snapshot is not None
    x = dict(zip(router.FEATURE_NAMES, second.snapshot.vectors["edge"], strict=True))
    assert x["busy_s"] == pytest.approx(predicted / 2)  # half of the first request is left
    assert second.snapshot.predictions["edge"].ttft_p50 > first.snapshot.predictions["edge"].ttft_p50
    r.observe(first, "edge", 0.1, predicted, 10)
    r.observe(second, "edge", 0.1, predicted, 10)
    assert r.work.pending("edge") == 0


def test_predictions_for_a_growing_queue_grow_linearly() -> None:
    """A fitted model that counts every second of waiting twice must not compound it."""
    r = router.Learner({}, clock=lambda: 0.0)
    width = len(router.FEATURE_NAMES)
    coefs = [0.0] * width
    coefs[0] = 1.0  # 1 s of service
    coefs[router.FEATURE_NAMES.index("busy_s")] = coefs[router.FEATURE_NAMES.index("ahead_s")] = 2.0
    r.predictor("edge").adopt(Coefficients(ttft=[coefs, coefs], total=[coefs, coefs]))
    f = router.Features(20, 64, 1, TEXT, False)
    totals = []
    for queued in range(30):
        view = views(edge_in_flight=1)[0]
        view = router.TierView("edge", view.capabilities, TierState("edge", Health.READY, 1, queued))
        d = route(r, "edge", [view], f, router.DEFAULT_POLICY)
        assert d.snapshot is not None
        totals.append(d.snapshot.predictions["edge"].total_p50)
    assert totals[-1] == pytest.approx(1 + 2 * 30, rel=0.05)  # 29 queued + 1 unknown in service


def test_a_tier_that_serves_requests_anyway_is_not_explored() -> None:
    policy = router.TenantPolicy(latency=router.LatencyObjective(total_ms=60_000))
    f = router.Features(20, 32, 1, TEXT, False, text="Say hello.")
    r = router.Learner({"cloud": router.TierPrice(prompt_per_1k=0.001)}, exploration=0.1, seed=1)
    picks = []
    for i in range(600):
        d = route(r, "tiergate-auto", views(), f, policy)
        picks.append(d.tier)
        if i % 5 == 0:  # the cloud serves one request in five (its own, e.g. images)
            r.observe(route(r, "cloud", views(), f, policy), "cloud", 0.1, 1.0, 10)
        r.observe(d, d.tier, 0.1, 1.0, 10)
    assert picks.count("cloud") == 0  # measured every few requests: no detour there
    for _ in range(600):  # the cloud no longer serves anything: explored at about 10%
        d = route(r, "tiergate-auto", views(), f, policy)
        picks.append(d.tier)
        r.observe(d, d.tier, 0.1, 1.0, 10)
    explored = picks[600:].count("cloud")
    assert 25 < explored < 100


def test_a_tier_that_says_its_slots_is_believed_over_the_most_it_was_seen_serving() -> None:
    """A batching edge says how many it takes at once (measured): when that falls below the most it
    was once seen serving, a request sent while that many run waits for a slot."""
    book = WorkBook()
    book.wait("edge", 4, 0, 0.0, 1.0)  # once seen serving four
    assert not book.queues("edge", 2, 0)  # from what it was seen doing: room for two more
    assert book.queues("edge", 2, 0, slots=2)  # it says it sustains two: the next one waits
    assert not book.queues("edge", 2, 0, slots=3)
    assert book.slots("edge") == 4 and book.slots("edge", 2) == 2
