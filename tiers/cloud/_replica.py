"""One vLLM server as the pool sees it: health, load signals, ejection and slow start.

Load comes from two places: the gateway's own count of what it has sent and not
yet seen finish (``outstanding_cost``: each request weighs its predicted cost, so
a long generation counts more than a short chat), and what vLLM reports on its
``/metrics`` (requests waiting and running, KV-cache use), scraped on an interval.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

# vLLM's own gauge names (the KV-cache one was called gpu_cache_usage_perc before 0.10).
_WAITING = "vllm:num_requests_waiting"
_RUNNING = "vllm:num_requests_running"
_KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


# KV-cache use below this is not load (vLLM keeps finished prefixes cached); above it, requests
# start to wait for blocks or get preempted.
KV_PRESSURE_FROM = 0.8


@dataclass(frozen=True, slots=True)
class EngineLoad:
    waiting: float = 0.0
    running: float = 0.0
    kv_cache_usage: float = 0.0  # 0..1


def parse_engine_load(metrics_text: str) -> EngineLoad:
    """Read vLLM's load gauges from its Prometheus text, summed over label sets (one per model).

    A line scan, not a full exposition parser: vLLM's page is tens of kilobytes of
    histograms, and only three gauges matter here.
    """
    waiting = running = kv = 0.0
    for line in metrics_text.splitlines():
        if not line.startswith("vllm:"):
            continue
        name, _, rest = line.partition("{")
        if not rest:
            name, _, rest = line.partition(" ")
        try:
            value = float(rest.rsplit(" ", 1)[-1])
        except ValueError:
            continue
        if name == _WAITING:
            waiting += value
        elif name == _RUNNING:
            running += value
        elif name in _KV_USAGE:
            kv = max(kv, value)
    return EngineLoad(waiting, running, kv)


@dataclass(slots=True)
class Replica:
    url: str
    name: str
    healthy: bool = False
    draining: bool = False
    in_flight: int = 0
    outstanding_cost: float = 0.0
    engine: EngineLoad = field(default_factory=EngineLoad)
    latency_ewma_s: float = 0.0
    consecutive_failures: int = 0
    ejected_until: float = 0.0
    ejections: int = 0
    healthy_since: float = 0.0
    last_error: str = ""
    served: int = 0
    # Requests that ended since the last /metrics scrape: that scrape still counts them as running.
    finished_since_scrape: int = 0
    # Requests vLLM ran at once the last time some also waited (its batch was full): how many it
    # serves at once, measured; 0 until it has been seen full.
    batch: int = 0

    def available(self, now: float) -> bool:
        return self.healthy and not self.draining and now >= self.ejected_until

    def weight(self, now: float, slow_start_s: float) -> float:
        """1.0 when settled; ramps up from 0.1 over ``slow_start_s`` after a return, so a replica
        that just came back is not flooded."""
        if slow_start_s <= 0:
            return 1.0
        age = now - self.healthy_since
        return 1.0 if age >= slow_start_s else 0.1 + 0.9 * max(age, 0.0) / slow_start_s

    def load(self, mean_cost: float) -> float:
        """Work ahead of a new request, in cost units: what we have in flight there, plus requests vLLM
        reports beyond ours (other clients), plus a penalty as its KV cache nears full (preemption)."""
        ours = self.in_flight + self.finished_since_scrape
        others = max(0.0, self.engine.waiting + self.engine.running - ours)
        kv_pressure = max(0.0, self.engine.kv_cache_usage - KV_PRESSURE_FROM) / (1 - KV_PRESSURE_FROM)
        return self.outstanding_cost + (others + 4 * kv_pressure) * mean_cost

    def scraped(self, engine: EngineLoad) -> None:
        """A reading of vLLM's ``/metrics``."""
        self.engine = engine
        self.finished_since_scrape = 0
        if engine.waiting > 0 and engine.running > 0:
            self.batch = int(engine.running)

    def waiting_ours(self) -> int:
        """Of our requests in flight here, those vLLM has not begun: its waiting ones, at most ours.
        They are part of ``in_flight`` (sent, not finished), so a tier state that counted them as
        queued beside it counted vLLM's queue twice."""
        return min(int(self.engine.waiting), self.in_flight)

    def observe(self, seconds: float) -> None:
        self.latency_ewma_s = (
            seconds if not self.latency_ewma_s else 0.8 * self.latency_ewma_s + 0.2 * seconds
        )

    def succeeded(self) -> None:
        self.consecutive_failures = 0
        self.served += 1

    def failed(self, why: str, *, eject_after: int, base_ejection_s: float) -> None:
        """Passive ejection: after ``eject_after`` failures in a row, out for a while (doubling)."""
        self.last_error = why
        self.consecutive_failures += 1
        if self.consecutive_failures >= eject_after:
            self.ejections += 1
            backoff = min(base_ejection_s * 2 ** (self.ejections - 1), 300.0)
            self.ejected_until = time.monotonic() + backoff
            self.consecutive_failures = 0

    def health_checked(self, ok: bool, error: str = "") -> None:
        now = time.monotonic()
        if ok and not self.healthy:
            self.healthy_since = now
        if ok and self.ejected_until and now >= self.ejected_until:
            self.ejected_until = 0.0
            self.healthy_since = now  # back from ejection: start slow
        if not ok:
            self.last_error = error or self.last_error
        self.healthy = ok

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "url": self.url,
            "healthy": self.healthy,
            "draining": self.draining,
            "ejected": self.ejected_until > time.monotonic(),
            "in_flight": self.in_flight,
            "outstanding_cost": round(self.outstanding_cost, 1),
            "vllm_waiting": self.engine.waiting,
            "vllm_running": self.engine.running,
            "kv_cache_usage": round(self.engine.kv_cache_usage, 3),
            "latency_ewma_ms": round(self.latency_ewma_s * 1000, 1),
            "served": self.served,
            "last_error": self.last_error,
        }
