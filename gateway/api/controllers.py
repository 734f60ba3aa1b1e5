"""HTTP handlers: thin, each calls a service and shapes the answer."""

from __future__ import annotations

from litestar import Request, Response, asgi, get
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.exceptions import MethodNotAllowedException
from litestar.types import Receive, Scope, Send

from gateway.accounts.policies import PolicyBook
from gateway.accounts.tenants import DEFAULT_TENANT
from gateway.api.asgi_io import EventStream, JSONAnswer, read_body
from gateway.api.protocol import encode, parse_chat_request
from gateway.api.request_id import request_id
from gateway.pipeline.chat import RequestContext, Routed
from gateway.services import Services, services_of

JSON = "application/json"


def _route_headers(routed: Routed) -> dict[str, str]:
    headers = {
        "X-Tiergate-Tier": routed.tier,
        "X-Tiergate-Route-Reason": routed.reason,
        "X-Tiergate-Cache": routed.cache.value,
        # Time in the gateway until the answer (or its first byte) was ready, and in the cache.
        "Server-Timing": f"gateway;dur={routed.server_s * 1000:.3f}, cache;dur={routed.cache_s * 1000:.3f}",
    }
    if routed.instance:
        headers["X-Tiergate-Instance"] = routed.instance
    if routed.predicted:
        headers["X-Tiergate-Predicted"] = routed.predicted
    if routed.degraded:
        headers["X-Tiergate-Degraded"] = ",".join(routed.degraded)
    return headers


_CHAT_HEADERS = frozenset((b"authorization", b"cache-control", b"x-session-id", b"content-length"))


def _chat_headers(scope: Scope) -> dict[str, str]:
    """The few headers the chat path reads, from one scan of the raw ASGI headers: cheaper than
    building ``request.headers`` (a full case-insensitive mapping) on the hot path."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in scope["headers"]
        if name in _CHAT_HEADERS
    }


def _context(headers: dict[str, str], tenant: str, policies: PolicyBook) -> RequestContext:
    policy = policies.policy(tenant)  # in memory; edits take effect on the next request
    return RequestContext(
        tenant=tenant,
        cache_control=headers.get("cache-control", ""),
        session_id=headers.get("x-session-id") or None,
        use_cache=policy.cache,
        fail_instead_of_degrade=policy.fail_instead_of_degrade,
    )


@asgi("/v1/chat/completions", copy_scope=False)
async def chat_completions(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only. A raw ASGI handler: the chat path reads its body and builds its answers itself
    (gateway/api/asgi_io.py), so Litestar's request parsing and response conversion are skipped;
    its routing, middleware and exception handlers still apply."""
    if scope["method"] != "POST":  # type: ignore[typeddict-item]
        raise MethodNotAllowedException(headers={"Allow": "POST"})
    services = services_of(scope["app"].state)  # a raw ASGI handler: no dependency injection
    headers = _chat_headers(scope)
    with services.tracing.span("auth"):
        caller = await services.auth.caller(headers)
    raw = await read_body(receive, headers.get("content-length"), services.settings.server.max_body_bytes)
    body = parse_chat_request(raw)
    rid = request_id(scope)
    ctx = _context(headers, caller.tenant.name if caller.tenant else DEFAULT_TENANT, services.policies)
    services.observer.note(scope, ctx.tenant, body.model)
    answer: JSONAnswer | EventStream
    if body.stream:
        start = await services.metered.stream(caller, body, rid, ctx)
        answer = EventStream(start.events, _route_headers(start.routed))
    else:
        routed, completion = await services.metered.complete(caller, body, rid, ctx)
        answer = JSONAnswer(encode(completion), _route_headers(routed))
    await answer(scope, receive, send)


@get("/v1/models")
async def list_models(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    await services.auth.caller(request.headers)
    return Response(encode(services.chat.models()), media_type=JSON)


@get("/healthz")
async def healthz() -> Response[bytes]:
    return Response(b'{"status":"ok"}', media_type=JSON)


@get("/readyz")
async def readyz(services: NamedDependency[Services]) -> Response[bytes]:
    chat = services.chat
    tiers = chat.tier_states()
    ready = any(t["health"] == "ready" for t in tiers)
    body = {"ready": ready, "tiers": tiers, "breakers": chat.breaker_states()}
    return Response(encode(body), media_type=JSON, status_code=200 if ready else 503)


@get("/metrics")
async def prometheus_metrics(services: NamedDependency[Services]) -> Response[bytes]:
    return Response(services.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


ROUTES = [chat_completions, list_models, healthz, readyz, prometheus_metrics]
