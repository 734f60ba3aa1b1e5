"""The work each tier has in hand: a new request's wait is the predicted time left of the
requests ahead of it, not their count × a mean service time; and exploration leaves alone a
tier that is measured anyway."""

from __future__ import annotations

import pytest

import router
from router._work import WorkBook
from tiers import Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})


def test_the_wait_behind_a_request_about_to_finish_is_short() -> None:
    book = WorkBook()
    book.add("edge", 10.0, now=0.0)  # a long generation, predicted to take 10 s
    assert book.wait("edge", 1, 0, now=1.0, mean_service_s=3.0) == (9.0, 0.0)  # just started
    assert book.wait("edge", 1, 0, now=8.0, mean_service_s=3.0) == (2.0, 0.0)  # almost done
    # Past its predicted finish it is still running: a tenth of its prediction is assumed left.
    assert book.wait("edge", 1, 0, now=12.0, mean_service_s=3.0) == (1.0, 0.0)


def test_queued_requests_wait_until_the_last_predicted_finish() -> None:
    book = WorkBook()
    book.add("edge", 4.0, now=0.0)  # being served, done at 4 s
    book.add("edge", 6.0, now=1.0)  # queued behind it: its 6 s include its wait, done at 7 s
    book.add("edge", 8.0, now=2.0)  # done at 10 s
    busy, ahead = book.wait("edge", 1, 2, now=3.0, mean_service_s=3.0)
    assert (busy, ahead) == (1.0, 6.0)  # the whole queue drains 7 s from now


def test_the_tiers_counts_decide_how_many_requests_are_ahead() -> None:
    book = WorkBook()
    first = book.add("edge", 5.0, now=0.0)
    book.add("edge", 5.0, now=0.0)
    book.done("edge", first)
    assert book.pending("edge") == 1
    # An entry the router never heard back about (its request failed) is older than the tier's count.
    book.add("edge", 2.0, now=1.0)
    assert book.wait("edge", 1, 0, now=2.0, mean_service_s=3.0) == (1.0, 0.0)
    # Requests the router did not route itself count as the mean service time each.
    assert book.wait("cloud", 2, 1, now=2.0, mean_service_s=3.0) == (6.0, 3.0)
    assert book.wait("edge", 0, 0, now=2.0, mean_service_s=3.0) == (0.0, 0.0)
    book.add("edge", 1.0, now=500.0)  # entries long past their finish are forgotten
    assert book.pending("edge") == 1


def views(edge_in_flight: int = 0) -> list[router.TierView]:
    caps = {n: Capabilities(TEXT, 4096, f"{n}-model", quality=q) for n, q in (("edge", 0.4), ("cloud", 0.7))}
    return [
        router.TierView("edge", caps["edge"], TierState("edge", Health.READY, edge_in_flight)),
        router.TierView("cloud", caps["cloud"], TierState("cloud", Health.READY)),
    ]


def test_the_router_books_what_it_sends_and_feeds_the_wait_to_the_predictor() -> None:
    clock = [100.0]
    r = router.Router(router.AutoRule(), {}, clock=lambda: clock[0])
    f = router.Features(20, 64, 1, TEXT, True)
    first = r.decide("edge", views(), f, router.DEFAULT_POLICY)
    assert first.detail is not None and r.work.pending("edge") == 1
    predicted = first.detail.predictions["edge"].total_p50
    clock[0] += predicted / 2
    second = r.decide("edge", views(edge_in_flight=1), f, router.DEFAULT_POLICY)
    assert second.detail is not None
    x = dict(zip(router.FEATURE_NAMES, second.detail.vectors["edge"], strict=True))
    assert x["busy_s"] == pytest.approx(predicted / 2)  # half of the first request is left
    assert second.detail.predictions["edge"].ttft_p50 > first.detail.predictions["edge"].ttft_p50
    r.observe(first, "edge", 0.1, predicted, 10)
    r.observe(second, "edge", 0.1, predicted, 10)
    assert r.work.pending("edge") == 0


def test_a_tier_that_serves_requests_anyway_is_not_explored() -> None:
    policy = router.TenantPolicy(latency=router.LatencyObjective(total_ms=60_000))
    f = router.Features(20, 32, 1, TEXT, False, text="Say hello.")
    r = router.Router(
        router.AutoRule(), {"cloud": router.TierPrice(prompt_per_1k=0.001)}, exploration=0.1, seed=1
    )
    picks = []
    for i in range(600):
        d = r.decide("tiergate-auto", views(), f, policy)
        picks.append(d.tier)
        if i % 5 == 0:  # the cloud serves one request in five (its own, e.g. images)
            r.observe(r.decide("cloud", views(), f, policy), "cloud", 0.1, 1.0, 10)
        r.observe(d, d.tier, 0.1, 1.0, 10)
    assert picks.count("cloud") == 0  # measured every few requests: no detour there
    for _ in range(600):  # the cloud no longer serves anything: explored at about 10%
        d = r.decide("tiergate-auto", views(), f, policy)
        picks.append(d.tier)
        r.observe(d, d.tier, 0.1, 1.0, 10)
    explored = picks[600:].count("cloud")
    assert 25 < explored < 100
