"""The desired-replicas signal, driven with its own clock (no test sleeps 30 s)."""

from __future__ import annotations

import math

from gateway.ops.scaling import DAY_S, ArrivalForecast, ReplicaSignal, ScalingSettings

SETTINGS = ScalingSettings(queue_threshold=8, sustain_s=30.0, cooldown_s=300.0, replica_rps=4.0, headroom=0.0)


def run(
    signal: ReplicaSignal, start: float, seconds: int, queue: int, replicas: int, rate: float = 0.0
) -> float:
    """Feed one observation a second; arrivals grow at ``rate`` per second."""
    now = start
    for _ in range(seconds):
        now += 1.0
        signal.update(queue, int(signal_arrivals(signal, rate)), replicas, now=now)
    return now


def signal_arrivals(signal: ReplicaSignal, rate: float) -> float:
    signal.total = getattr(signal, "total", 0.0) + rate  # type: ignore[attr-defined]
    return signal.total  # type: ignore[attr-defined,no-any-return]


def test_a_sustained_queue_raises_the_signal_and_it_falls_only_after_the_cooldown() -> None:
    signal = ReplicaSignal(SETTINGS, clock=lambda: 0.0)
    assert signal.desired == 1
    now = run(signal, 0.0, 29, queue=20, replicas=1)
    assert signal.desired == 1, "a queue for less than 30 s asks for nothing"
    now = run(signal, now, 2, queue=20, replicas=1)
    assert signal.desired == 2, "30 s over the threshold: one more replica"
    now = run(signal, now, 31, queue=20, replicas=2)
    assert signal.desired == 3, "still queued 30 s later: another"
    # The queue drains: the signal holds through the cool-down, then falls.
    now = run(signal, now, 290, queue=0, replicas=3)
    assert signal.desired == 3
    now = run(signal, now, 20, queue=0, replicas=3)
    assert signal.desired == 1


def test_a_queue_that_comes_and_goes_does_not_scale_up() -> None:
    signal = ReplicaSignal(SETTINGS)
    now = 0.0
    for _ in range(10):
        now = run(signal, now, 20, queue=20, replicas=1)
        now = run(signal, now, 1, queue=0, replicas=1)
    assert signal.desired == 1


def test_a_rising_arrival_rate_is_forecast_and_asks_for_replicas_before_a_queue_forms() -> None:
    signal = ReplicaSignal(SETTINGS)
    total, now = 0.0, 0.0
    # 20 minutes of arrivals rising from 2/s to 12/s (0.5/s more each minute), no queue.
    for second in range(1200):
        now += 1.0
        total += 2.0 + 10.0 * second / 1200
        signal.update(0, int(total), 1, now=now)
    observed = signal.arrivals.observed
    assert 11 < observed < 13
    # five minutes ahead the line is at ~14.5/s: 4 replicas at 4 requests/s each
    assert signal.arrivals.forecast > observed + 1.5
    assert signal.desired == math.ceil(signal.arrivals.forecast / 4.0)
    assert signal.desired >= 4


def test_the_daily_cycle_is_learnt_from_history_and_anticipates_the_peak() -> None:
    settings = ScalingSettings(forecast_horizon_s=6 * 3600.0)
    forecast = ArrivalForecast(settings)

    def rate(t: float) -> float:
        return 10.0 + 8.0 * math.sin(2 * math.pi * t / DAY_S)  # peak at 6 h, trough at 18 h

    total, t = 0.0, 0.0
    # A day and three quarters, one observation a minute; stop at the trough (18 h).
    while t < 1.75 * DAY_S:
        t += 60.0
        total += rate(t) * 60.0
        forecast.add(t, int(total))
    assert abs(rate(t) - 2) < 0.5, "now: the trough"
    # Six hours ahead is the mean (10/s): a straight line through the last 15 minutes, rising from
    # the trough, would not know that; the cycle does.
    assert abs(forecast.forecast - rate(t + 6 * 3600)) < 1.5
    t_day = t
    while t < t_day + 0.25 * DAY_S:
        t += 60.0
        total += rate(t) * 60.0
        forecast.add(t, int(total))
    # at 6 h past the trough (the mean, rising fastest) the next 6 h end at the peak
    assert abs(forecast.forecast - 18.0) < 1.5
    assert forecast.forecast > forecast.observed + 5


def test_the_signal_stays_within_its_bounds() -> None:
    settings = ScalingSettings(min_replicas=2, max_replicas=3, sustain_s=30.0, cooldown_s=60.0)
    signal = ReplicaSignal(settings)
    assert signal.desired == 2
    run(signal, 0.0, 400, queue=100, replicas=3)
    assert signal.desired == 3
