"""The request's side of observability: its id in the log context, its root span, and the
request metrics and log line written when its response ends; and the gauges read from live
state when /metrics is scraped.

:func:`Observer.middleware` wraps every route: it sets :data:`gateway.ops.logs.REQUEST_ID`
for the request's context and notes when it arrived.  :meth:`Observer.before_send` (an
app-level hook, so errors and unknown paths pass through it too) adds ``X-Request-ID`` to
every response and, on the response's last body message, counts the request by route,
tenant class, tier, model and status, observes its duration and writes the request log line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Final, Literal, TypedDict, cast

import msgspec
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from gateway.ops.gates import GateFigures, Lane
from gateway.ops.logs import REQUEST_ID
from gateway.ops.metrics import Metrics, tenant_class
from gateway.ops.request_id import request_id
from gateway.ops.tracing import Tracing

log = logging.getLogger("tiergate.request")

_STARTED: Final = "tiergate.started"
_STATUS: Final = "tiergate.status"
_TIER: Final = "tiergate.tier"
_LABELS: Final = "tiergate.labels"  # (tenant class, model)
_SPAN: Final = "tiergate.span"
# The keys above and their values in a request's ASGI scope: Litestar's Scope type lists only
# the keys it knows, so the scope is written through this view (a cast) to add ours.
_Marks = TypedDict(
    "_Marks",
    {
        "tiergate.started": float,
        "tiergate.status": int,
        "tiergate.tier": str,
        "tiergate.labels": tuple[str, str],
        "tiergate.span": Any,  # an OpenTelemetry span
    },
    total=False,
)
_TIER_HEADER = b"x-tiergate-tier"
_UNLABELLED = ("none", "none")
_REPLICA_SIGNALS = (
    "healthy",
    "draining",
    "ejected",
    "in_flight",
    "outstanding_cost",
    "vllm_waiting",
    "vllm_running",
    "kv_cache_usage",
)
_BREAKER_LEVEL = {"closed": 0, "half_open": 1, "open": 2}


class ObservabilitySettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # false: no metrics are recorded and /metrics is empty.
    metrics: bool = True
    # "json": one JSON object per log line, with the request id; "text": plain lines.
    log_format: Literal["json", "text"] = "json"
    # One log line per answered request (method, route, status, tier, duration).
    request_log: bool = False
    # Tenants whose name may be a metric label; every other tenant is "priority" (listed in
    # admission.priority_tenants) or "standard". Keep this list short: each adds series.
    tenant_labels: list[str] = msgspec.field(default_factory=list)
    # OTLP/HTTP traces endpoint, e.g. "http://127.0.0.1:4318/v1/traces"; empty: no traces.
    # Needs the otel extra: pip install 'tiergate[otel]'.
    otlp_endpoint: str = ""
    service_name: str = "tiergate"
    # /metrics and /readyz's details (replica URLs, upstream error text) for anyone; false: only for
    # clients on loopback (behind a proxy: list it in server.trusted_proxies) or with an admin key.
    # Others get /readyz's status alone and a 403 for /metrics.
    public_details: bool = False


class Observer:
    def __init__(
        self,
        settings: ObservabilitySettings,
        metrics: Metrics,
        tracing: Tracing,
        *,
        priority_tenants: Iterable[str] = (),
        models: Iterable[str] = (),
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.tracing = tracing
        self._named = frozenset(settings.tenant_labels)
        self._priority = frozenset(priority_tenants)
        self._models = frozenset(models)
        self._classes: dict[str, str] = {}
        self._request_log = settings.request_log

    @property
    def needs_middleware(self) -> bool:
        """Needed for request durations, the id in the log context (JSON logs, the request log)
        and traces; without any of them a request skips it."""
        return (
            self.metrics.enabled
            or self.settings.log_format == "json"
            or self._request_log
            or self.tracing.enabled
        )

    # -- per request -------------------------------------------------------------------------------

    def middleware(self, app: ASGIApp) -> ASGIApp:
        tracing = self.tracing

        async def observed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != ScopeType.HTTP:
                await app(scope, receive, send)
                return
            marks = cast(_Marks, scope)
            marks[_STARTED] = time.perf_counter()
            token = REQUEST_ID.set(request_id(scope))
            try:
                if tracing.enabled:
                    route = scope.get("path_template", scope["path"])
                    name = f"{scope['method']} {route}"
                    attributes = {"http.route": route, "tiergate.request_id": request_id(scope)}
                    with tracing.server_span(name, **attributes) as span:
                        marks[_SPAN] = span
                        await app(scope, receive, send)
                else:
                    await app(scope, receive, send)
            finally:
                REQUEST_ID.reset(token)

        return observed

    def note(self, scope: Any, tenant: str, model: str) -> None:
        """What the chat handler learnt: the tenant (as its class) and the model asked for."""
        klass = self._classes.get(tenant)
        if klass is None:
            klass = tenant_class(tenant, self._named, self._priority)
            if len(self._classes) < 10_000:
                self._classes[tenant] = klass
        scope[_LABELS] = (klass, model if model in self._models else "unknown")

    def before_send(self) -> Callable[[Message, Scope], Awaitable[None]]:
        metrics, request_log = self.metrics, self._request_log

        async def hook(message: Message, scope: Scope) -> None:
            marks = cast(_Marks, scope)
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", request_id(scope).encode("ascii")))
                message["headers"] = headers
                marks[_STATUS] = message["status"]
                if _LABELS in marks:  # a chat request: which tier answered (Litestar lowercases names)
                    for name, value in headers:
                        if name == _TIER_HEADER:
                            marks[_TIER] = value.decode("latin-1")
                            break
                return
            if message["type"] != "http.response.body" or message.get("more_body", False):
                return
            status: int = marks.get(_STATUS, 0)
            route: str = scope.get("path_template", "unmatched")
            tier: str = marks.get(_TIER, "none")
            tenant, model = marks.get(_LABELS, _UNLABELLED)
            started = marks.get(_STARTED)
            seconds = time.perf_counter() - started if started is not None else None
            metrics.request_done(route, tenant, tier, model, status, seconds)
            span = marks.get(_SPAN)
            if span is not None:
                span.set_attributes({"http.status_code": status, "tiergate.tier": tier})
            if request_log:
                log.info(
                    "%s %s %d",
                    scope["method"],  # type: ignore[typeddict-item]
                    scope["path"],
                    status,
                    extra={
                        "route": route,
                        "status": status,
                        "tier": tier,
                        "tenant_class": tenant,
                        "model": model,
                        "ms": round(seconds * 1000, 3) if seconds is not None else None,
                    },
                )

        return hook


def live_gauges(
    tiers: Mapping[str, Any],
    breakers: Callable[[], list[dict[str, str]]],
    gates: Mapping[str, GateFigures] | None = None,
) -> Callable[[Metrics], None]:
    """A scrape hook: gauges read from the tiers' state, their admission gates (``gates``, by tier)
    and the breakers."""
    gates = gates or {}

    def refresh(metrics: Metrics) -> None:
        for name, tier in tiers.items():
            state = tier.state().as_dict()
            gate = gates.get(name)
            metrics.tier_ready.labels(name).set(1 if state["health"] == "ready" else 0)
            metrics.tier_in_flight.labels(name).set(state.get("in_flight", 0))
            metrics.tier_queued.labels(name).set(state.get("queued", 0) + (gate.waiting if gate else 0))
            if gate is not None or state.get("slots"):
                metrics.tier_slots.labels(name).set(gate.slots if gate is not None else state["slots"])
            for replica in state.get("instances", ()):
                for signal in _REPLICA_SIGNALS:
                    metrics.replica.labels(replica["name"], signal).set(float(replica[signal]))
            if gate is not None:
                for lane in Lane:
                    metrics.queue_length.labels(name, lane.value).set(gate.waiting_in(lane))
                    metrics.queue_bound.labels(name, lane.value).set(gate.bound(lane))
        for breaker in breakers():
            level = _BREAKER_LEVEL[breaker["state"]]
            metrics.breaker_state.labels(breaker["tier"], breaker["modality"]).set(level)

    return refresh
