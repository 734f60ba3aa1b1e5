"""``/v1/responses``: create (JSON or streamed), retrieve and delete, per tenant.

A create is one run of the chat pipeline (gateway/pipeline/chat.py): its parse stage is
:meth:`Turn.parse`, which decodes the Responses request, reads the stored conversation it continues
and translates both into the chat request every other stage takes.  The answer's events are framed
here as a ``response`` object or its event stream; a stored response is written before the client
sees it finish (``response.completed``, or the JSON body), so it can be continued at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator

import msgspec
from litestar import Request, Response, asgi, delete, get
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.types import Receive, Scope, Send

from gateway.accounts.stored_responses import ResponseStore, Stored
from gateway.accounts.tenants import DEFAULT_TENANT
from gateway.api.asgi_io import JSONAnswer, SSEResponse
from gateway.api.door import door, respond
from gateway.api.framing import route_headers, tiergate_info
from gateway.api.responses import input_items
from gateway.api.responses import objects as ro
from gateway.api.responses.stream import ResponseEvents
from gateway.api.responses.translate import (
    chat_request,
    continued,
    decode_thread,
    encode_thread,
    messages_of,
)
from gateway.errors import PermissionDenied, to_gateway_error
from gateway.pipeline.answer import Answer
from gateway.services import Services
from gateway.wire.chat import ChatCompletionRequest, Message
from gateway.wire.decoding import decode_error, decoded
from gateway.wire.responses import FunctionTool, ResponsesRequest, parse_responses_request
from tiers import Event, Finished, assemble

JSON = "application/json"


class Turn:
    """One ``POST /v1/responses``: the request as sent, what it continues, where it is kept."""

    def __init__(self, store: ResponseStore) -> None:
        self._store = store
        self.tenant = DEFAULT_TENANT
        self.request: ResponsesRequest | None = None
        self.tools: list[FunctionTool] = []
        self.added: list[Message] = []  # what its input adds to the conversation
        self.id = ro.new_id("resp")

    async def parse(self, body: bytes, tenant: str) -> ChatCompletionRequest:
        """Stage 2 for this endpoint (the pipeline calls it once the caller is known)."""
        request, items, self.tools = await decoded(parse_responses_request, body)
        self.request, self.tenant = request, tenant
        history: list[Message] = []
        if request.previous_response_id is not None:
            for added in await self._store.conversation(tenant, request.previous_response_id):
                history += decode_thread(added)
        self.added = messages_of(items)
        chat = chat_request(request, self.tools, [*history, *self.added], continued=bool(history))
        if request.stored:
            await self._store.check_room(tenant)
        return chat

    def opening(self, model: str) -> ro.Response:
        assert self.request is not None
        return ro.opening(self.id, self.request, self.tools, model)

    async def keep(self, response: ro.Response, answer_events: list[Event]) -> bytes:
        """The response's body; stored first when the request said so."""
        body = ro.encode(response)
        assert self.request is not None
        if self.request.stored:
            added = encode_thread(continued(self.added, assemble(answer_events), response.max_tool_calls))
            parent = self.request.previous_response_id
            await self._store.put(self.tenant, self.id, Stored(body, added, parent))
        return body


def _response(turn: Turn, answer: Answer, events: list[Event]) -> ro.Response:
    whole = assemble(events)
    response = turn.opening(answer.model)
    limit = response.max_tool_calls
    calls = whole.choices[0].tool_calls if limit is None else whole.choices[0].tool_calls[:limit]
    output = ro.output_of(whole.choices[0], ro.new_id("msg"), [ro.new_id("fc") for _ in calls], limit)
    final = ro.finished(response, whole, output)
    final.tiergate = tiergate_info(answer)
    return final


async def response_body(turn: Turn, answer: Answer) -> bytes:
    """The ``response`` object of a JSON answer (also a batch line's: gateway/api/batches/runner.py)."""
    events = [e async for e in answer.events]
    return await turn.keep(_response(turn, answer, events), events)


async def _stream(turn: Turn, answer: Answer) -> AsyncGenerator[bytes, None]:
    writer = ResponseEvents(turn.opening(answer.model), obfuscate=answer.obfuscate)
    seen: list[Event] = []
    events = answer.events
    try:
        yield writer.opening()
        async for event in events:
            seen.append(event)
            if isinstance(event, Finished):
                final = writer.final(assemble(seen))
                final.tiergate = tiergate_info(answer)
                await turn.keep(final, seen)
                yield writer.finish(final)
                return
            if out := writer.piece(event):
                yield out
        yield writer.failed("server_error", "the answer ended before it finished")
    except Exception as exc:  # the tier failed mid-stream: the status is sent already
        error = to_gateway_error(exc)
        code = "rate_limit_exceeded" if error.status == 429 else "server_error"
        yield writer.failed(code, error.message)
    finally:
        await events.aclose()


@asgi("/v1/responses", copy_scope=False)
async def create_response(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only; a raw ASGI handler as the chat endpoint is (gateway/api/controllers.py)."""
    services, incoming, departure = door(scope, receive, endpoint="responses")
    turn = Turn(services.responses)  # reads the stored conversation it continues, keeps this one
    incoming = dataclasses.replace(incoming, parse=turn.parse)

    async def make() -> JSONAnswer | SSEResponse:
        answer = await services.pipeline.run(incoming)
        if services.outcomes is not None:  # feedback may name the answer by its resp_ id
            services.outcomes.alias(turn.id, incoming.request_id)
        if answer.stream:
            return SSEResponse(_stream(turn, answer), route_headers(answer.routed))
        return JSONAnswer(await response_body(turn, answer), route_headers(answer.routed))

    await respond(scope, receive, send, departure, make)


async def _tenant(request: Request[object, object, State], services: Services) -> str:
    """The tenant whose stored responses the caller's key reads (an admin key has none, as for chat)."""
    caller = await services.auth.caller(request.headers)
    if caller.tenant is None:
        raise PermissionDenied("admin keys manage tenants; read stored responses with a tenant's key")
    return caller.tenant.name


@get("/v1/responses/{response_id:str}")
async def retrieve_response(
    request: Request[object, object, State], services: NamedDependency[Services], response_id: FromPath[str]
) -> Response[bytes]:
    body = await services.responses.get(await _tenant(request, services), response_id)
    return Response(body, media_type=JSON)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(
    request: Request[object, object, State], services: NamedDependency[Services], response_id: FromPath[str]
) -> Response[bytes]:
    await services.responses.delete(await _tenant(request, services), response_id)
    body = {"id": response_id, "object": "response.deleted", "deleted": True}
    return Response(ro.encode(body), media_type=JSON)


@get("/v1/responses/{response_id:str}/input_items")
async def list_input_items(
    request: Request[object, object, State], services: NamedDependency[Services], response_id: FromPath[str]
) -> Response[bytes]:
    """The response's input items, paged as OpenAI pages them (``after``, ``limit``, ``order``)."""
    query = dict(request.query_params)
    query.pop("include", None)  # input items carry their image URLs already (all OpenAI includes here)
    try:
        paging = msgspec.convert(query, input_items.Page, strict=False)
    except msgspec.ValidationError as exc:
        raise decode_error(exc) from exc
    added = await services.responses.added(await _tenant(request, services), response_id)
    items = input_items.items_of(decode_thread(added)[:-1], response_id)
    return Response(ro.encode(input_items.page(items, paging)), media_type=JSON)


ROUTES = [create_response, retrieve_response, delete_response, list_input_items]
