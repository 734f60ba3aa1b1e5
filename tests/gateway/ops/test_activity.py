"""The live view's ring of recent decisions and its one-minute summary."""

from __future__ import annotations

import dataclasses

from gateway.ops.activity import Activity, Decision, percentile


def decision(
    ts: float, tier: str = "edge", status: int = 200, cache: str = "miss", ms: float = 10.0
) -> Decision:
    return Decision(ts, "acme", "tiergate-auto", tier, "why", cache, status, ms)


def test_the_ring_keeps_the_newest_decisions_newest_first() -> None:
    activity = Activity(recent=3)
    for i in range(5):
        activity.note(decision(float(i)))
    assert [d.ts for d in activity.recent(10)] == [4.0, 3.0, 2.0]
    assert [d.ts for d in activity.recent(2)] == [4.0, 3.0]


def test_summary_counts_only_the_window_and_answered_requests() -> None:
    activity = Activity()
    now = 1000.0
    activity.note(decision(now - 120, tier="cloud"))  # outside the minute
    for i in range(6):
        activity.note(
            decision(now - 30 + i, tier="edge", ms=10.0 * (i + 1), cache="hit" if i < 2 else "miss")
        )
    activity.note(decision(now - 10, tier="cloud", ms=500.0, cache="bypass"))
    activity.note(decision(now - 5, tier="", status=429, cache="bypass", ms=0.1))
    summary = activity.summary(60, now=now)
    assert summary.requests == 8 and summary.errors == 1
    assert summary.share == {"cloud": 1 / 7, "edge": 6 / 7}
    assert summary.cache_hit_rate == 2 / 6  # bypassed requests did not look
    assert summary.p95_ms == 500.0
    assert summary.p95_ms_by_tier == {"cloud": 500.0, "edge": 60.0}
    assert 8 / 60 <= summary.requests_per_s <= 8 / 30


def test_an_empty_window_has_no_rates() -> None:
    summary = Activity().summary(60, now=50.0)
    assert summary.requests == 0 and summary.p95_ms is None and summary.cache_hit_rate is None
    assert summary.share == {} and summary.requests_per_s == 0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 95) == 95.0
    assert percentile([3.0], 95) == 3.0
    assert percentile([1.0, 2.0], 50) == 1.0


def test_a_huge_model_name_is_kept_bounded() -> None:
    activity = Activity(recent=3)
    activity.note(Decision(1.0, "acme", "m" * 1_000_000, "", "r" * 50_000, "bypass", 404, 1.0))
    [kept] = activity.recent()
    assert len(kept.model_asked) == 256 and len(kept.reason) == 1000


def test_residency_matches_are_counted_per_rule_and_action_in_the_window() -> None:
    activity = Activity()
    now = 1000.0
    iban, mail = ("iban", "keep_local"), ("email", "redact")
    activity.note(dataclasses.replace(decision(now - 120), residency=(iban,)))  # outside the minute
    activity.note(dataclasses.replace(decision(now - 20), residency=(iban, mail)))
    activity.note(
        dataclasses.replace(decision(now - 10, status=400, tier=""), residency=(("secret", "refuse"),))
    )
    activity.note(dataclasses.replace(decision(now - 5), residency=(mail,)))
    activity.note(decision(now - 1))
    summary = activity.summary(60, now=now)
    assert summary.residency == {"email -> redact": 2, "iban -> keep_local": 1, "secret -> refuse": 1}
    assert activity.recent(5)[3].as_dict()["residency"] == ["iban -> keep_local", "email -> redact"]
    assert Activity().summary(60, now=now).residency == {}
