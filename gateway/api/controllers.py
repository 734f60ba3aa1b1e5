"""HTTP handlers: thin, each calls a service and shapes the answer."""

from __future__ import annotations

import contextlib
import ipaddress

import msgspec
from litestar import Request, Response, asgi, get
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.types import Receive, Scope, Send

from gateway.accounts.tenants import key_of
from gateway.api import completions as legacy
from gateway.api.asgi_io import JSONAnswer, SSEResponse
from gateway.api.door import door, respond
from gateway.api.feedback import FEEDBACK_ROUTES
from gateway.api.framing import event_stream, json_body, route_headers
from gateway.api.messages import ROUTES as MESSAGES_ROUTES
from gateway.api.responses import ROUTES as RESPONSES_ROUTES
from gateway.api.speech import ROUTES as SPEECH_ROUTES
from gateway.errors import GatewayError, NotFound, PermissionDenied
from gateway.pipeline.endpoints.embeddings.stages import ENDPOINT as EMBEDDINGS
from gateway.pipeline.endpoints.speech import TRANSCRIPTIONS, TRANSLATIONS
from gateway.services import Services
from gateway.wire.chat import encode

JSON = "application/json"


@asgi("/v1/chat/completions", copy_scope=False)
async def chat_completions(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only. A raw ASGI handler: the chat path reads its body and builds its answers itself
    (gateway/api/asgi_io.py), so Litestar's request parsing and response conversion are skipped;
    its routing, middleware and exception handlers still apply.  The stages are the pipeline's
    (gateway/pipeline/chat.py); this frames what it answers."""
    services, incoming, departure = door(scope, receive)

    async def make() -> JSONAnswer | SSEResponse:
        answer = await services.pipeline.run(incoming)
        if answer.stream:
            return SSEResponse(event_stream(answer), route_headers(answer.routed))
        return JSONAnswer(await json_body(answer), route_headers(answer.routed))

    await respond(scope, receive, send, departure, make)


@asgi("/v1/completions", copy_scope=False)
async def completions(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only: OpenAI's legacy completions (gateway/api/completions/), each prompt a run of the
    chat pipeline in its raw-prompt mode; framed as ``text_completion``."""
    services, incoming, departure = door(scope, receive)
    rid = incoming.request_id

    async def make() -> JSONAnswer | SSEResponse:
        asked, answers, later = await legacy.start(services.pipeline, services.auth, incoming)
        first = answers[0]
        if asked.stream:
            events = legacy.event_stream(
                first,
                later,
                asked.prompts,
                asked.n,
                echo=asked.echo,
                include_usage=asked.include_usage,
                rid=rid,
            )
            return SSEResponse(events, route_headers(first.routed))
        body = await legacy.json_body(answers, asked.prompts, asked.n, asked.echo, rid)
        return JSONAnswer(body, route_headers(first.routed))

    await respond(scope, receive, send, departure, make)


@asgi(EMBEDDINGS, copy_scope=False)
async def embeddings(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only; raw ASGI like chat. The stages are gateway/pipeline/endpoints/embeddings/stages.py's."""
    services, incoming, departure = door(scope, receive, endpoint="embeddings")
    pipeline = services.embeddings
    if pipeline is None:
        raise NotFound(f"{EMBEDDINGS} is off here (embedding.enabled = false)")

    async def make() -> JSONAnswer:
        answer = await pipeline.run(incoming)
        return JSONAnswer(answer.body, route_headers(answer.routed))

    await respond(scope, receive, send, departure, make)


def _embedding_cards(services: Services) -> list[dict[str, object]]:
    """The embedding and speech models (and their aliases), saying which endpoints serve them."""
    created = services.tiers.card("tiergate-auto").created
    served: list[tuple[str, list[str]]] = []
    if services.embeddings is not None:
        served += [(n, [EMBEDDINGS]) for n in services.embeddings.model_names]
    if services.speech is not None:
        served += [(n, [TRANSCRIPTIONS, TRANSLATIONS]) for n in services.speech.model_names]
    return [
        {"id": n, "object": "model", "created": created, "owned_by": "tiergate", "endpoints": paths}
        for n, paths in served
    ]


@get("/v1/models")
async def list_models(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    await services.auth.caller(request.headers)
    listed = msgspec.to_builtins(services.tiers.models())
    listed["data"] += _embedding_cards(services)
    return Response(encode(listed), media_type=JSON)


@get("/v1/models/{model:path}")
async def retrieve_model(
    request: Request[object, object, State], services: NamedDependency[Services], model: FromPath[str]
) -> Response[bytes]:
    """One model card (``client.models.retrieve``); an unknown name is a 404 as for chat."""
    await services.auth.caller(request.headers)
    name = model.lstrip("/")
    card = next((c for c in _embedding_cards(services) if c["id"] == name), None)
    return Response(encode(card or services.tiers.card(name)), media_type=JSON)


@get("/healthz")
async def healthz() -> Response[bytes]:
    return Response(b'{"status":"ok"}', media_type=JSON)


async def _may_see_details(request: Request[object, object, State], services: Services) -> bool:
    """Replica URLs and upstream error text are for operators: a client on loopback (the real client,
    as gateway/ops/clients.py reads it behind trusted proxies), an admin key, or everyone when
    ``observability.public_details`` says so."""
    if services.settings.observability.public_details:
        return True
    host = request.client.host if request.client else ""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return True
    if not key_of(request.headers):
        return False
    with contextlib.suppress(GatewayError):
        return (await services.auth.caller(request.headers)).is_admin
    return False


@get("/readyz")
async def readyz(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    tiers = services.activity.with_spend(services.tiers.states())
    ready = any(t["health"] == "ready" for t in tiers)
    body: dict[str, object] = {"ready": ready}
    if await _may_see_details(request, services):
        body |= {"tiers": tiers, "breakers": services.tiers.breaker_states()}
    return Response(encode(body), media_type=JSON, status_code=200 if ready else 503)


@get("/metrics")
async def prometheus_metrics(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    if not await _may_see_details(request, services):
        raise PermissionDenied(
            "/metrics is for operators: scrape it from loopback or with an admin key "
            "(or set observability.public_details)"
        )
    return Response(services.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


ROUTES = [
    chat_completions,
    completions,
    embeddings,
    *SPEECH_ROUTES,
    *RESPONSES_ROUTES,
    *MESSAGES_ROUTES,
    *FEEDBACK_ROUTES,
    list_models,
    retrieve_model,
    healthz,
    readyz,
    prometheus_metrics,
]
