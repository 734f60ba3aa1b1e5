"""The scaling signal ``tiergate_cloud_desired_replicas``: how many cloud replicas the load needs.

Two recommendations, the larger wins:

* **queue** (reactive): when the requests waiting for the cloud tier (its admission lanes
  plus what vLLM reports waiting) stay above ``queue_threshold`` for ``sustain_s`` (30 s),
  ask for ``scale_up_step`` more replicas than now, and again after every further
  ``sustain_s`` the queue stays up.  While the queue is up, the signal never falls.
* **forecast** (predictive): arrivals per second are kept per ``bucket_s`` minute for up
  to ``history_s`` (two days).  Once the history covers most of a day, a daily cycle
  ``c·sin(ωt) + d·cos(ωt)`` (ω = 2π / 1 day) is fitted to all of it by least squares;
  a straight line (linear regression) is fitted to what is left over the last
  ``trend_window_s``; the forecast is both at ``now + forecast_horizon_s``, and asks for
  ``ceil(rate × (1 + headroom) / replica_rps)`` replicas.

A higher recommendation is taken at once; a lower one only when every recommendation
over the last ``cooldown_s`` was at most that (the stabilisation window a Kubernetes
HPA uses), so the pool is not shrunk by a lull.  The clock is injectable: tests drive
:meth:`ReplicaSignal.update` with their own times.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Callable

import msgspec
import numpy as np

from gateway.ops.gates import GateFigures
from gateway.ops.metrics import Metrics
from tiers import Tier

log = logging.getLogger(__name__)

DAY_S = 86400.0
_OMEGA = 2 * math.pi / DAY_S


class ScalingSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    interval_s: float = 1.0
    queue_threshold: int = 8
    sustain_s: float = 30.0
    scale_up_step: int = 1
    cooldown_s: float = 300.0
    min_replicas: int = 1
    max_replicas: int = 32
    # Requests per second one replica serves within its latency target (measure it with bench/).
    replica_rps: float = 4.0
    headroom: float = 0.2
    forecast_horizon_s: float = 300.0
    trend_window_s: float = 900.0
    bucket_s: float = 60.0
    history_s: float = 2 * DAY_S


class ArrivalForecast:
    """Arrival rate per bucket, and its forecast: a daily cycle plus a recent linear trend."""

    def __init__(self, settings: ScalingSettings) -> None:
        self._s = settings
        self._times: collections.deque[float] = collections.deque()
        self._rates: collections.deque[float] = collections.deque()
        self._bucket_start: float | None = None
        self._bucket_arrivals = 0
        self.observed = 0.0  # the last closed bucket's rate
        self.forecast = 0.0

    def add(self, now: float, arrivals_total: int) -> None:
        if self._bucket_start is None:
            self._bucket_start, self._bucket_arrivals = now, arrivals_total
            return
        span = now - self._bucket_start
        if span < self._s.bucket_s:
            return
        rate = max(0, arrivals_total - self._bucket_arrivals) / span
        self._times.append(self._bucket_start + span / 2)
        self._rates.append(rate)
        while self._times and self._times[0] < now - self._s.history_s:
            self._times.popleft()
            self._rates.popleft()
        self._bucket_start, self._bucket_arrivals = now, arrivals_total
        self.observed = rate
        self.forecast = self.predict(now + self._s.forecast_horizon_s, now)

    def predict(self, at: float, now: float) -> float:
        if not self._rates:
            return 0.0
        t = np.fromiter(self._times, float)
        r = np.fromiter(self._rates, float)
        seasonal = np.zeros(2)
        if t[-1] - t[0] >= 0.75 * DAY_S:  # enough of a day to see its cycle
            cycle = np.column_stack([np.ones_like(t), np.sin(_OMEGA * t), np.cos(_OMEGA * t)])
            seasonal = np.linalg.lstsq(cycle, r, rcond=None)[0][1:]
        residual = r - seasonal[0] * np.sin(_OMEGA * t) - seasonal[1] * np.cos(_OMEGA * t)
        recent = t >= now - self._s.trend_window_s
        x, y = t[recent] - now, residual[recent]
        if len(x) >= 3:
            slope, level = np.polyfit(x, y, 1)
        else:
            slope, level = 0.0, float(y.mean() if len(y) else residual[-1])
        cycle_at = seasonal[0] * math.sin(_OMEGA * at) + seasonal[1] * math.cos(_OMEGA * at)
        value = level + slope * (at - now) + cycle_at
        # A trend is not extrapolated past twice the busiest bucket seen.
        return float(min(max(value, 0.0), 2 * float(r.max())))


class ReplicaSignal:
    def __init__(self, settings: ScalingSettings, clock: Callable[[], float] = time.time) -> None:
        self._s = settings
        self.settings = settings
        self.clock = clock
        self.arrivals = ArrivalForecast(settings)
        self.desired = settings.min_replicas
        self._over_since: float | None = None
        self._recent: collections.deque[tuple[float, int]] = collections.deque()

    def update(self, queue: int, arrivals_total: int, replicas: int, now: float | None = None) -> int:
        """Take one observation (requests waiting, arrivals counted so far, replicas serving now);
        return the desired replica count."""
        s = self._s
        now = self.clock() if now is None else now
        self.arrivals.add(now, arrivals_total)
        forecast = math.ceil(self.arrivals.forecast * (1 + s.headroom) / s.replica_rps - 1e-9)
        wanted = max(s.min_replicas, forecast)
        if queue > s.queue_threshold:
            if self._over_since is None:
                self._over_since = now
            elif now - self._over_since >= s.sustain_s:
                wanted = max(wanted, max(self.desired, replicas) + s.scale_up_step)
                self._over_since = now  # the next step after another sustained period
            wanted = max(wanted, self.desired)  # a queue is up: never lower
        else:
            self._over_since = None
        wanted = min(max(wanted, s.min_replicas), s.max_replicas)
        self._recent.append((now, wanted))
        while self._recent and self._recent[0][0] < now - s.cooldown_s:
            self._recent.popleft()
        if wanted >= self.desired:
            self.desired = wanted
        elif self._recent[0][0] <= now - s.cooldown_s + s.interval_s:  # a full window has been seen
            self.desired = max(w for _, w in self._recent)
        return self.desired


def replicas_serving(tier: Tier) -> int:
    """Replicas of a pool that are healthy and not draining (1 for a tier without replicas)."""
    instances = tier.state().instances
    if not instances:
        return 1
    return sum(1 for r in instances if r.get("healthy") and not r.get("draining") and not r.get("ejected"))


async def run_signal(
    signal: ReplicaSignal, tier: Tier, metrics: Metrics, gate: GateFigures | None = None
) -> None:
    """Recompute the signal every ``interval_s`` from the cloud tier's queue (its own and its
    admission gate's, ``gate``) and arrivals."""
    metrics.desired_replicas.set(signal.desired)
    while True:
        await asyncio.sleep(signal.settings.interval_s)
        try:
            arrivals = gate.arrivals if gate is not None else 0
            queued = tier.state().queued + (gate.waiting if gate is not None else 0)
            desired = signal.update(queued, arrivals, replicas_serving(tier))
        except Exception:
            log.exception("scaling signal: update failed")
            continue
        metrics.desired_replicas.set(desired)
        metrics.arrival_rate.labels("observed").set(signal.arrivals.observed)
        metrics.arrival_rate.labels("forecast").set(signal.arrivals.forecast)
