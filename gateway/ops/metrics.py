"""Prometheus metrics of one gateway, on a registry of its own (no global state).

Every family is a field of :class:`Metrics`; the hot paths call small methods that
keep label values bounded.  The API other parts call (preprocessing, the router,
the edge registry) is these methods, each safe to call on every request:

    metrics.preprocess_observed(stage, seconds)     # stage: one of PREPROCESS_STAGES
    metrics.media_cache_lookup(hit)                  # media cache hit or miss
    metrics.route_decided(strategy, tier, reason_class)
    metrics.predictor_error(tier, predicted, actual, target="total")     # |p - a| / a; or "ttft"
    metrics.generated(tier, tokens, seconds)         # tokens and tokens/s of one generation
    metrics.timed_out(tier)                           # a tier call that ran past its deadline
    metrics.rate_limited(reason)                      # a 429, by why
    metrics.queue_waited(tier, lane, seconds)         # time in an admission lane
    metrics.ledger_written(seconds)                   # one durable ledger write

Label values are never request ids or keys: tiers, lanes, stages and routes come from
fixed sets, tenants are reduced to a class (see :func:`tenant_class`), and every free-form
label is capped at ``MAX_VALUES_PER_LABEL`` distinct values (later ones become ``other``).
With ``enabled=False`` every family is a no-op (the benchmark's baseline; /metrics is empty).

The families themselves (names, help texts, labels, buckets) are declared in
:mod:`gateway.ops.metric_families`; this module binds and caps their children and records.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import generate_latest

from gateway.ops.metric_families import MetricFamilies

# The stages gateway.media times: the fetch, the media-cache lookup, each kind's round trip through
# the decode pool, and the worker's own steps per kind.
PREPROCESS_STAGES = frozenset(
    {
        "fetch",
        "cache",
        *(f"{kind}_pool" for kind in ("image", "video", "audio")),
        "image_decode",
        "image_resize",
        "image_encode",
        "video_open",
        "video_sample",
        "video_encode",
        "video_audio",
        "audio_open",
        "audio_decode",
    }
)
OTHER = "other"
MAX_VALUES_PER_LABEL = 32


@dataclass(frozen=True, slots=True)
class TierMetrics:
    """One tier's labelled children, bound once: ``labels()`` takes a lock on every call."""

    latency: Any
    ttft: Any
    tokens: Any
    tokens_per_second: Any


def tenant_class(tenant: str, named: frozenset[str], priority: frozenset[str]) -> str:
    """A bounded label for a tenant: its own name if the operator listed it
    (``observability.tenant_labels``), else ``priority`` or ``standard``."""
    if tenant in named:
        return tenant
    return "priority" if tenant in priority else "standard"


class Metrics(MetricFamilies):
    def __init__(self, *, enabled: bool = True) -> None:
        self._tiers: dict[str, TierMetrics] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._requests: dict[tuple[str, str, str, str, int], tuple[Any, Any]] = {}
        self._seen: dict[tuple[int, int], set[str]] = {}
        self._scrape_hooks: list[Callable[[Metrics], None]] = []
        super().__init__(enabled=enabled)

    # -- binding children ------------------------------------------------------------------------

    def child(self, family: Any, *values: str, free: tuple[int, ...] = ()) -> Any:
        """``family.labels(*values)``, bound once and cached; label positions in ``free`` take
        caller-chosen values and are capped at ``MAX_VALUES_PER_LABEL`` distinct ones."""
        key = (id(family), values)
        found = self._children.get(key)
        if found is not None:
            return found
        if free:
            capped = list(values)
            for i in free:
                seen = self._seen.setdefault((id(family), i), set())
                if values[i] not in seen:
                    if len(seen) >= MAX_VALUES_PER_LABEL:
                        capped[i] = OTHER
                    else:
                        seen.add(values[i])
            if capped != list(values):
                return family.labels(*capped)  # not cached: the raw values are unbounded
        bound = family.labels(*values)
        self._children[key] = bound
        return bound

    # -- the hot-path API ---------------------------------------------------------------------------

    def tier(self, name: str) -> TierMetrics:
        bound = self._tiers.get(name)
        if bound is None:
            bound = TierMetrics(
                self.child(self.latency, name, free=(0,)),
                self.child(self.ttft, name, free=(0,)),
                self.child(self.generated_tokens, name, free=(0,)),
                self.child(self.tokens_per_second, name, free=(0,)),
            )
            if len(self._tiers) < MAX_VALUES_PER_LABEL:
                self._tiers[name] = bound
        return bound

    def request_done(
        self, route: str, tenant: str, tier: str, model: str, status: int, seconds: float | None
    ) -> None:
        """One answered HTTP request; ``seconds`` None when its start was not seen."""
        key = (route, tenant, tier, model, status)
        pair = self._requests.get(key)
        if pair is None:
            labels = (route, tenant, tier, model, str(status))
            pair = (
                self.child(self.requests, *labels, free=(0, 1, 2, 3, 4)),
                self.child(self.request_duration, *labels, free=(0, 1, 2, 3, 4)),
            )
            if len(self._requests) < 4096:
                self._requests[key] = pair
        pair[0].inc()
        if seconds is not None:
            pair[1].observe(seconds)

    def rate_limited(self, reason: str) -> None:
        self.child(self.rate_limited_total, reason, free=(0,)).inc()

    def timed_out(self, tier: str) -> None:
        self.child(self.timeouts, tier, free=(0,)).inc()

    def generated(self, tier: str, tokens: int, seconds: float) -> None:
        if tokens <= 0:
            return
        bound = self.tier(tier)
        bound.tokens.inc(tokens)
        if seconds > 0:
            bound.tokens_per_second.observe(tokens / seconds)

    def queue_waited(self, tier: str, lane: str, seconds: float) -> None:
        self.child(self.queue_wait, tier, lane, free=(0, 1)).observe(seconds)

    def preprocess_observed(self, stage: str, seconds: float) -> None:
        """Time of one preprocessing stage of one medium."""
        self.child(self.preprocess, stage if stage in PREPROCESS_STAGES else OTHER).observe(seconds)

    def media_parted(self, kind: str, count: int) -> None:
        self.child(self.media_parts, kind).inc(count)

    def media_cache_lookup(self, hit: bool) -> None:
        self.child(self.media_cache, "hit" if hit else "miss").inc()

    def route_decided(self, strategy: str, tier: str, reason_class: str) -> None:
        """One routing decision. ``reason_class`` is a short class (``size_rule``, ``slo``,
        ``budget``, ``tier_unavailable``, ...), never the full human-readable reason."""
        self.child(self.route_decisions, strategy, tier, reason_class, free=(0, 1, 2)).inc()

    def predictor_error(self, tier: str, predicted: float, actual: float, target: str = "latency") -> None:
        """The absolute percentage error of one prediction (skipped when ``actual`` is not positive)."""
        if actual > 0:
            ape = abs(predicted - actual) / actual
            self.child(self.predictor_ape, tier, target, free=(0, 1)).observe(ape)

    def ledger_written(self, seconds: float) -> None:
        self.ledger_write.observe(seconds)

    # -- exposition ---------------------------------------------------------------------------------

    def on_scrape(self, hook: Callable[[Metrics], None]) -> None:
        """Run ``hook`` before each render (for gauges read from live state)."""
        self._scrape_hooks.append(hook)

    def render(self) -> bytes:
        if not self.enabled:
            return b""
        for hook in self._scrape_hooks:
            hook(self)
        return generate_latest(self.registry)
