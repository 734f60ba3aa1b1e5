"""Prometheus metrics of one gateway, on a registry of its own (no global state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Latency buckets from 1 ms to 2 min: the gateway's own work sits at the bottom,
# CPU-bound generations at the top.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


@dataclass(frozen=True, slots=True)
class TierMetrics:
    """One tier's labelled children, bound once: ``labels()`` takes a lock on every call."""

    latency: Any
    ttft: Any


class Metrics:
    def __init__(self) -> None:
        self._tiers: dict[str, TierMetrics] = {}
        self._request_counters: dict[tuple[bytes, int], Any] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "tiergate_requests",
            "Chat requests answered, by tier and HTTP status.",
            ["tier", "status"],
            registry=r,
        )
        self.latency = Histogram(
            "tiergate_tier_latency_seconds",
            "Time from dispatch to a tier until its full answer.",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "tiergate_time_to_first_token_seconds",
            "Time from dispatch to a tier until its first token.",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.failovers = Counter(
            "tiergate_failovers",
            "Requests moved to a fallback tier before the first byte.",
            ["from_tier"],
            registry=r,
        )
        # One series per replica and signal; replica names are the pool's own (cloud-0, cloud-1, ...).
        self.replica = Gauge(
            "tiergate_replica",
            "Cloud replica state: healthy, draining, ejected (0/1), in_flight, outstanding_cost, and the "
            "vllm_waiting, vllm_running and kv_cache_usage its /metrics last reported.",
            ["replica", "signal"],
            registry=r,
        )
        self.tier_ready = Gauge(
            "tiergate_tier_ready",
            "1 when the tier can serve, else 0.",
            ["tier"],
            registry=r,
        )

        self.cache_requests = Counter(
            "tiergate_cache_requests",
            "Result cache lookups by result (hit, miss, bypass).",
            ["result"],
            registry=r,
        )
        self.cache_lookup = Histogram(
            "tiergate_cache_lookup_seconds",
            "Time to read one answer from the result cache.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.5),
            registry=r,
        )
        self.cache_errors = Counter(
            "tiergate_cache_errors",
            "Result cache backend failures (served as misses), by operation.",
            ["op"],
            registry=r,
        )
        self.breaker_state = Gauge(
            "tiergate_breaker_state",
            "Circuit breaker per tier and modality: 0 closed, 1 half-open, 2 open.",
            ["tier", "modality"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            "tiergate_breaker_transitions",
            "Circuit breaker state changes, by the state entered.",
            ["tier", "modality", "state"],
            registry=r,
        )
        self.degraded = Counter(
            "tiergate_degraded_requests",
            "Requests served without a modality because no tier could take it (breaker open).",
            ["modality"],
            registry=r,
        )

    def tier(self, name: str) -> TierMetrics:
        bound = self._tiers.get(name)
        if bound is None:
            bound = self._tiers[name] = TierMetrics(self.latency.labels(name), self.ttft.labels(name))
        return bound

    def count_request(self, tier: bytes, status: int) -> None:
        counter = self._request_counters.get((tier, status))
        if counter is None:
            counter = self.requests.labels(tier.decode(), str(status))
            self._request_counters[(tier, status)] = counter
        counter.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
