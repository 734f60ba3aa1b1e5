"""HTTP handlers: thin, each calls a service and shapes the answer."""

from __future__ import annotations

from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.response import Stream

from gateway.accounts import Accounts
from gateway.chat import ChatService, Routed
from gateway.metrics import Metrics
from gateway.protocol import encode, parse_chat_request
from gateway.request_id import request_id

JSON = "application/json"


def _route_headers(routed: Routed) -> dict[str, str]:
    return {"X-Tiergate-Tier": routed.tier, "X-Tiergate-Route-Reason": routed.reason}


@post("/v1/chat/completions", status_code=200)
async def chat_completions(request: Request[object, object, State], state: State) -> Response[bytes]:
    accounts: Accounts = state.accounts
    caller = await accounts.auth.caller(request.headers)
    body = parse_chat_request(await request.body())
    rid = request_id(request.scope)
    if body.stream:
        start = await accounts.metered.stream(caller, body, rid)
        return Stream(
            start.events,
            media_type="text/event-stream",
            headers={**_route_headers(start.routed), "Cache-Control": "no-cache"},
        )
    routed, completion = await accounts.metered.complete(caller, body, rid)
    return Response(encode(completion), media_type=JSON, headers=_route_headers(routed))


@get("/v1/models")
async def list_models(request: Request[object, object, State], state: State) -> Response[bytes]:
    accounts: Accounts = state.accounts
    await accounts.auth.caller(request.headers)
    chat: ChatService = state.chat
    return Response(encode(chat.models()), media_type=JSON)


@get("/healthz")
async def healthz() -> Response[bytes]:
    return Response(b'{"status":"ok"}', media_type=JSON)


@get("/readyz")
async def readyz(state: State) -> Response[bytes]:
    chat: ChatService = state.chat
    tiers = chat.tier_states()
    ready = any(t["health"] == "ready" for t in tiers)
    return Response(
        encode({"ready": ready, "tiers": tiers}), media_type=JSON, status_code=200 if ready else 503
    )


@get("/metrics")
async def prometheus_metrics(state: State) -> Response[bytes]:
    metrics: Metrics = state.metrics
    chat: ChatService = state.chat
    for tier in chat.tier_states():
        metrics.tier_ready.labels(tier["name"]).set(1 if tier["health"] == "ready" else 0)
    return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


ROUTES = [chat_completions, list_models, healthz, readyz, prometheus_metrics]
