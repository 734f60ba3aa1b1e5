"""``/v1/messages`` and ``/v1/messages/count_tokens``: Anthropic's Messages API, one run of the chat
pipeline each (gateway/pipeline/chat.py).

A create's parse stage is :meth:`Turn.parse`, which decodes the Messages request and translates it into
the chat request every other stage takes (gateway/api/messages/translate.py); the answer's events are
framed here as a ``message`` or its event stream (gateway/api/messages/stream.py).  A stream's events
pass the one ending on their way (gateway/pipeline/ending.py), so a client that closes it is billed for
what the tier made, as on chat.  Errors leave in Anthropic's shape (``gateway.errors.error_response``
looks at the path); the key may come as ``x-api-key`` or ``Authorization: Bearer``; the
``anthropic-version`` and ``anthropic-beta`` headers are accepted and read by no one (one version of
the API is spoken); ``anthropic-user-profile-id`` and ``anthropic-workspace-id`` are the SDK's
``user_profile_id`` and ``workspace_id`` (gateway/wire/anthropic/fields.py says what each does).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import msgspec
from litestar import asgi
from litestar.types import Receive, Scope, Send

from gateway.api.asgi_io import JSONAnswer, SSEResponse
from gateway.api.door import door, respond
from gateway.api.framing import route_headers
from gateway.api.messages.caching import cache_marks
from gateway.api.messages.checks import PROFILE_HEADER, WORKSPACE_HEADER, check_request
from gateway.api.messages.stream import MessageEvents
from gateway.api.messages.translate import chat_request, finished_of, message_of, new_id
from gateway.errors import UpstreamFailed, to_gateway_error
from gateway.pipeline.answer import Answer, Routed
from gateway.pipeline.plan import features_of
from gateway.wire import messages as am
from gateway.wire.chat import ChatCompletionRequest
from gateway.wire.decoding import decoded
from tiers import Event, Finished, assemble


class Turn:
    """One ``POST /v1/messages`` (or its token count): its id and the chat request it became."""

    def __init__(self, headers: Mapping[str, str], count: bool = False) -> None:
        self.id = new_id("msg")
        self.chat: ChatCompletionRequest | None = None
        self.diagnosed = False  # the request asked for diagnostics
        self.cache_marks: list[dict[str, Any]] = []  # its cache_control breakpoints (caching.py)
        self._headers = headers
        self._count = count

    async def parse(self, body: bytes, tenant: str) -> ChatCompletionRequest:
        """Stage 2 for this endpoint (the pipeline calls it once the caller is known)."""
        request: am.CreateMessage | am.CountTokens = await decoded(
            am.parse_count if self._count else am.parse_create, body
        )  # a large body: off the loop
        check_request(request, tenant, self._headers.get(WORKSPACE_HEADER))
        self.diagnosed = isinstance(request, am.CreateMessage) and request.diagnostics is not None
        self.chat = chat_request(request, self._headers.get(PROFILE_HEADER))
        if isinstance(request, am.CreateMessage):
            self.cache_marks.extend(cache_marks(request))
        return self.chat


def _info(answer: Answer) -> am.TiergateInfo | None:
    degraded = answer.routed.degraded
    return am.TiergateInfo(degraded=list(degraded)) if degraded else None


async def _json(turn: Turn, answer: Answer) -> bytes:
    events: list[Event] = [e async for e in answer.events]
    finished = finished_of(events)
    message = message_of(turn.id, answer.model, assemble(events), finished, _info(answer), turn.diagnosed)
    return msgspec.json.encode(message)


async def _stream(turn: Turn, answer: Answer) -> AsyncGenerator[bytes, None]:
    assert turn.chat is not None
    writer = MessageEvents(
        turn.id, answer.model, features_of(turn.chat).prompt_tokens, answer.routed.degraded, turn.diagnosed
    )
    events = answer.events
    try:
        yield writer.opening()
        async for event in events:
            if isinstance(event, Finished):
                yield writer.finish(event)
                return
            if out := writer.piece(event):
                yield out
        yield writer.failed(UpstreamFailed("the answer ended before it finished"))
    except Exception as exc:  # the tier failed mid-stream: the status is sent already
        yield writer.failed(to_gateway_error(exc))
    finally:
        await events.aclose()


@asgi("/v1/messages", copy_scope=False)
async def create_message(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only; a raw ASGI handler as the chat endpoint is (gateway/api/controllers.py)."""
    services, incoming, departure = door(scope, receive, endpoint="messages")
    turn = Turn(incoming.headers)
    incoming = dataclasses.replace(incoming, parse=turn.parse, cache_marks=turn.cache_marks)

    async def make() -> JSONAnswer | SSEResponse:
        answer = await services.pipeline.run(incoming)
        headers = _headers(answer.routed, incoming.request_id)
        if answer.stream:
            return SSEResponse(_stream(turn, answer), headers)
        return JSONAnswer(await _json(turn, answer), headers)

    await respond(scope, receive, send, departure, make)


def _headers(routed: Routed, request_id: str) -> dict[str, str]:
    """The route headers, as on chat, and the request id as Anthropic's clients read it (``request-id``:
    the SDK's ``_request_id``; ``X-Request-ID`` is on every response already)."""
    return {**route_headers(routed), "request-id": request_id}


def _count_headers(routed: Routed, request_id: str) -> dict[str, str]:
    return {k: v for k, v in _headers(routed, request_id).items() if k != "X-Tiergate-Tier"}  # no tier ran


@asgi("/v1/messages/count_tokens", copy_scope=False)
async def count_tokens(scope: Scope, receive: Receive, send: Send) -> None:
    """The prompt's tokens as the router estimates them (no tier runs; see ChatPipeline.count)."""
    services, incoming, departure = door(scope, receive, endpoint="messages.count_tokens")
    incoming = dataclasses.replace(incoming, parse=Turn(incoming.headers, count=True).parse)

    async def make() -> JSONAnswer:
        tokens, routed = await services.pipeline.count(incoming)
        return JSONAnswer(
            msgspec.json.encode(am.TokenCount(tokens)), _count_headers(routed, incoming.request_id)
        )

    await respond(scope, receive, send, departure, make)


ROUTES = [create_message, count_tokens]
