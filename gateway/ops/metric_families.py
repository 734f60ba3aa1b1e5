"""Every Prometheus family the gateway exports (name, help, labels, buckets) on a registry of its
own: :class:`MetricFamilies`, which :class:`gateway.ops.metrics.Metrics` extends with the
hot-path API. Also the two kinds of child the hot path needs: a Histogram observed with one
bisection, and a child that records nothing when metrics are off.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Latency buckets from 1 ms to 2 min: the gateway's own work sits at the bottom,
# CPU-bound generations at the top.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
FAST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5)
RATE_BUCKETS = (1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 250, 500, 1000)
ERROR_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5)


class BisectHistogram(Histogram):
    """prometheus_client's Histogram, observed with one bisection instead of a Python loop over
    the buckets (a request observes ~6 histograms). Only bound children are observed here."""

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        if exemplar is not None or amount != amount:  # exemplars, NaN: the library's own way
            super().observe(amount, exemplar)
            return
        self._sum.inc(amount)
        self._buckets[bisect_left(self._upper_bounds, amount)].inc(1)


class NullChild:
    """A metric that records nothing (metrics turned off)."""

    def labels(self, *args: Any, **kwargs: Any) -> NullChild:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def dec(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass


NULL = NullChild()


class MetricFamilies:
    """The families, each a field; with ``enabled=False`` every one is :data:`NULL`."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.registry = CollectorRegistry(auto_describe=True)

        # -- requests at the HTTP edge -------------------------------------------------
        request_labels = ["route", "tenant_class", "tier", "model", "status"]
        self.requests = self._family(Counter, "tiergate_requests", "HTTP requests answered.", request_labels)
        self.request_duration = self._family(
            Histogram,
            "tiergate_request_duration_seconds",
            "Time from a request's arrival until its response's last byte.",
            request_labels,
            buckets=LATENCY_BUCKETS,
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
            buckets=LATENCY_BUCKETS,
        )
        self.ttft = self._family(
            Histogram,
            "tiergate_time_to_first_token_seconds",
            "Time from dispatch to a tier until its first token.",
            ["tier"],
            buckets=LATENCY_BUCKETS,
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
            buckets=RATE_BUCKETS,
        )
        self.tier_ready = self._family(
            Gauge, "tiergate_tier_ready", "1 when the tier can serve, else 0.", ["tier"]
        )
        self.tier_in_flight = self._family(
            Gauge, "tiergate_tier_in_flight", "Requests a tier is working on now.", ["tier"]
        )
        self.tier_slots = self._family(
            Gauge,
            "tiergate_tier_slots",
            "Requests a tier works on at once now (admission's slots; a batching edge's follow what its "
            "batch is measured to sustain).",
            ["tier"],
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
            buckets=LATENCY_BUCKETS,
        )
        # -- preprocessing and caches ---------------------------------------------------------
        self.preprocess = self._family(
            Histogram,
            "tiergate_preprocess_seconds",
            "Media preprocessing time per request and stage (fetch, cache, <kind>_pool, image_decode, "
            "image_resize, video_sample, audio_decode, ...), summed over the request's parts.",
            ["stage"],
            buckets=FAST_BUCKETS,
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
            "Result cache lookups by result (hit, semantic, miss, bypass).",
            ["result"],
        )
        # -- the embedding tier ---------------------------------------------------------
        self.embedding_inputs = self._family(
            Counter,
            "tiergate_embedding_inputs",
            "Inputs of /v1/embeddings, by where their vector came from (hit: the cache, miss: the model).",
            ["result"],
        )
        self.embedding_batch_rows = self._family(
            Histogram,
            "tiergate_embedding_batch_rows",
            "Rows (inputs, from one or more requests) in one call of the embedding model.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
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
            buckets=ERROR_BUCKETS,
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
        self.residency = self._family(
            Counter,
            "tiergate_residency_matches",
            "Requests a tenant's residency rule matched, by the rule's label and its action.",
            ["rule", "action"],
        )
        # -- ledger ----------------------------------------------------------------------------------
        self.ledger_write = self._family(
            Histogram,
            "tiergate_ledger_write_seconds",
            "Time until a request's ledger row was durable in the write-ahead file.",
            buckets=FAST_BUCKETS,
        )
        self.ledger_backlog = self._family(
            Gauge,
            "tiergate_ledger_backlog_rows",
            "Ledger rows written ahead but not yet moved into the database.",
        )
        self.ledger_quarantined = self._family(
            Counter,
            "tiergate_ledger_quarantined_rows",
            "Ledger rows the database refused, set aside with the reason in ledger/quarantine.jsonl.",
        )
        # -- batches ---------------------------------------------------------------------------------
        self.batch_lines = self._family(
            Counter,
            "tiergate_batch_lines",
            "Batch lines this gateway ran, by outcome (ok: a 2xx answer; error: any other; retried: "
            "refused for a limit or a full lane and put back).",
            ["outcome"],
        )
        self.batch_lines_running = self._family(
            Gauge, "tiergate_batch_lines_running", "Batch lines this gateway is running now."
        )
        self.batches_active = self._family(
            Gauge,
            "tiergate_batches_active",
            "Batches in progress, cancelling or finalizing (every gateway's, read from the database).",
        )
        self.batch_lines_left = self._family(
            Gauge,
            "tiergate_batch_lines_left",
            "Lines of active batches not yet done (every gateway's, read from the database).",
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

    def _family(self, kind: type, name: str, doc: str, labels: Iterable[str] = (), **kw: Any) -> Any:
        if not self.enabled:
            return NULL
        if kind is Histogram:
            kind = BisectHistogram
        return kind(name, doc, list(labels), registry=self.registry, **kw)
