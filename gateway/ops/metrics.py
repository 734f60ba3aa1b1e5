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
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Latency buckets from 1 ms to 2 min: the gateway's own work sits at the bottom,
# CPU-bound generations at the top.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
_FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5)
_RATE_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 250, 500, 1000)
_ERROR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5)

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


class _Histogram(Histogram):
    """prometheus_client's Histogram, observed with one bisection instead of a Python loop over
    the buckets (a request observes ~6 histograms). Only bound children are observed here."""

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        if exemplar is not None or amount != amount:  # exemplars, NaN: the library's own way
            super().observe(amount, exemplar)
            return
        self._sum.inc(amount)
        self._buckets[bisect_left(self._upper_bounds, amount)].inc(1)


class _NullChild:
    """A metric that records nothing (metrics turned off)."""

    def labels(self, *args: Any, **kwargs: Any) -> _NullChild:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


_NULL = _NullChild()


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


class Metrics:
    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._tiers: dict[str, TierMetrics] = {}
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._requests: dict[tuple[str, str, str, str, int], tuple[Any, Any]] = {}
        self._seen: dict[tuple[int, int], set[str]] = {}
        self._scrape_hooks: list[Callable[[Metrics], None]] = []
        self.registry = CollectorRegistry(auto_describe=True)

        # -- requests at the HTTP edge -------------------------------------------------
        request_labels = ["route", "tenant_class", "tier", "model", "status"]
        self.requests = self._family(Counter, "tiergate_requests", "HTTP requests answered.", request_labels)
        self.request_duration = self._family(
            Histogram,
            "tiergate_request_duration_seconds",
            "Time from a request's arrival until its response's last byte.",
            request_labels,
            buckets=_LATENCY_BUCKETS,
        )
        self.rate_limited_total = self._family(
            Counter,
            "tiergate_rate_limited",
            "Requests answered 429, by reason (tenant_requests, tenant_tokens, tenant_images, ..., "
            "queue_fast, queue_slow, upstream).",
            ["reason"],
        )
        # -- tiers ---------------------------------------------------------------------
        self.latency = self._family(
            Histogram,
            "tiergate_tier_latency_seconds",
            "Time from dispatch to a tier until its full answer.",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
        )
        self.ttft = self._family(
            Histogram,
            "tiergate_time_to_first_token_seconds",
            "Time from dispatch to a tier until its first token.",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
        )
        self.timeouts = self._family(
            Counter, "tiergate_timeouts", "Tier calls that ran past their deadline.", ["tier"]
        )
        self.failovers = self._family(
            Counter,
            "tiergate_failovers",
            "Requests moved to a fallback tier before the first byte.",
            ["from_tier"],
        )
        self.generated_tokens = self._family(
            Counter, "tiergate_generated_tokens", "Completion tokens generated, by tier.", ["tier"]
        )
        self.tokens_per_second = self._family(
            Histogram,
            "tiergate_generation_tokens_per_second",
            "Completion tokens per second of one generation (the edge model's speed, the pool's).",
            ["tier"],
            buckets=_RATE_BUCKETS,
        )
        self.tier_ready = self._family(
            Gauge, "tiergate_tier_ready", "1 when the tier can serve, else 0.", ["tier"]
        )
        self.tier_in_flight = self._family(
            Gauge, "tiergate_tier_in_flight", "Requests a tier is working on now.", ["tier"]
        )
        self.tier_queued = self._family(
            Gauge,
            "tiergate_tier_queued",
            "Requests waiting for a tier (admission lanes and engine queues).",
            ["tier"],
        )
        # One series per replica and signal; replica names are the pool's own (cloud-0, cloud-1, ...).
        self.replica = self._family(
            Gauge,
            "tiergate_replica",
            "Cloud replica state: healthy, draining, ejected (0/1), in_flight, outstanding_cost, and the "
            "vllm_waiting, vllm_running and kv_cache_usage its /metrics last reported.",
            ["replica", "signal"],
        )
        # -- admission lanes -------------------------------------------------------------
        self.queue_length = self._family(
            Gauge, "tiergate_queue_length", "Requests waiting in an admission lane.", ["tier", "lane"]
        )
        self.queue_bound = self._family(
            Gauge,
            "tiergate_queue_bound",
            "An admission lane's bound (service rate x tolerable delay); beyond it, 429.",
            ["tier", "lane"],
        )
        self.queue_wait = self._family(
            Histogram,
            "tiergate_queue_wait_seconds",
            "Time a request waited in an admission lane for a slot (0 when one was free).",
            ["tier", "lane"],
            buckets=_LATENCY_BUCKETS,
        )
        # -- preprocessing and caches ---------------------------------------------------------
        self.preprocess = self._family(
            Histogram,
            "tiergate_preprocess_seconds",
            "Media preprocessing time per request and stage (fetch, cache, <kind>_pool, image_decode, "
            "image_resize, video_sample, audio_decode, ...), summed over the request's parts.",
            ["stage"],
            buckets=_FAST_BUCKETS,
        )
        self.media_cache = self._family(
            Counter, "tiergate_media_cache_requests", "Media cache lookups by result (hit, miss).", ["result"]
        )
        self.media_parts = self._family(
            Counter, "tiergate_media_parts", "Media parts preprocessed, by kind.", ["kind"]
        )
        self.cache_requests = self._family(
            Counter,
            "tiergate_cache_requests",
            "Result cache lookups by result (hit, miss, bypass).",
            ["result"],
        )
        self.cache_lookup = self._family(
            Histogram,
            "tiergate_cache_lookup_seconds",
            "Time to read one answer from the result cache.",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.5),
        )
        self.cache_errors = self._family(
            Counter,
            "tiergate_cache_errors",
            "Result cache backend failures (served as misses), by operation.",
            ["op"],
        )
        # -- routing ----------------------------------------------------------------------------
        self.route_decisions = self._family(
            Counter,
            "tiergate_route_decisions",
            "Routing decisions by strategy (pinned, rule, learned, ...), tier chosen and reason class.",
            ["strategy", "tier", "reason_class"],
        )
        self.predictor_ape = self._family(
            Histogram,
            "tiergate_predictor_absolute_percentage_error",
            "The predictor's |predicted - actual| / actual per request, by tier and target (total, ttft).",
            ["tier", "target"],
            buckets=_ERROR_BUCKETS,
        )
        # -- breakers and degradation ------------------------------------------------------------
        self.breaker_state = self._family(
            Gauge,
            "tiergate_breaker_state",
            "Circuit breaker per tier and modality: 0 closed, 1 half-open, 2 open.",
            ["tier", "modality"],
        )
        self.breaker_transitions = self._family(
            Counter,
            "tiergate_breaker_transitions",
            "Circuit breaker state changes, by the state entered.",
            ["tier", "modality", "state"],
        )
        self.degraded = self._family(
            Counter,
            "tiergate_degraded_requests",
            "Requests served without a modality because no tier could take it (breaker open).",
            ["modality"],
        )
        # -- ledger ----------------------------------------------------------------------------------
        self.ledger_write = self._family(
            Histogram,
            "tiergate_ledger_write_seconds",
            "Time until a request's ledger row was durable in the write-ahead file.",
            buckets=_FAST_BUCKETS,
        )
        self.ledger_backlog = self._family(
            Gauge,
            "tiergate_ledger_backlog_rows",
            "Ledger rows written ahead but not yet moved into the database.",
        )
        # -- scaling signal -------------------------------------------------------------------------
        self.desired_replicas = self._family(
            Gauge,
            "tiergate_cloud_desired_replicas",
            "How many cloud replicas the load needs: queue over its threshold for long enough, or the "
            "forecast arrival rate over one replica's capacity; falls only after the cool-down.",
        )
        self.arrival_rate = self._family(
            Gauge,
            "tiergate_cloud_arrivals_per_second",
            "Cloud requests per second: observed over the last minute, and forecast for the horizon.",
            ["kind"],
        )

    # -- construction ----------------------------------------------------------------------------

    def _family(self, kind: type, name: str, doc: str, labels: Iterable[str] = (), **kw: Any) -> Any:
        if not self.enabled:
            return _NULL
        if kind is Histogram:
            kind = _Histogram
        return kind(name, doc, list(labels), registry=self.registry, **kw)

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
