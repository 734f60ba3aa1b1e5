"""Driving the chat pipeline's stages 5–8 (:class:`~gateway.pipeline.chat.ChatService`) in a test:
build one over plain tier objects, and frame its answers as a client would get them."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass

import router
from gateway.api.framing import completion, event_stream
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.admission import Gates
from gateway.pipeline.answer import Routed
from gateway.pipeline.answers.exact import AnswerCache
from gateway.pipeline.chat import ChatService, RequestContext
from gateway.pipeline.routing_service import RoutingService
from gateway.pipeline.tierset import TierSet
from gateway.wire.chat import ChatCompletionRequest
from gateway.wire.chat_response import ChatCompletion
from tiers import Tier


def chat_service(
    tiers: Mapping[str, Tier],
    rule: router.AutoRule | None = None,
    metrics: Metrics | None = None,
    *,
    answers: AnswerCache | None = None,
    breakers: router.BreakerBoard | None = None,
    routing: RoutingService | None = None,
    fail_instead_of_degrade: bool = False,
    gates: Gates | None = None,
) -> ChatService:
    return ChatService(
        TierSet(tiers, breakers, gates=gates),
        metrics or Metrics(),
        Tracing(),
        rule=rule,
        answers=answers,
        routing=routing,
        fail_instead_of_degrade=fail_instead_of_degrade,
    )


async def complete(
    chat: ChatService, request: ChatCompletionRequest, request_id: str, ctx: RequestContext | None = None
) -> tuple[Routed, ChatCompletion]:
    """A JSON answer: where it came from, and its body."""
    answer = await chat.answer(request, request_id, ctx or RequestContext())
    return answer.routed, await completion(answer)


@dataclass(frozen=True, slots=True)
class Streamed:
    routed: Routed
    events: AsyncGenerator[bytes, None]  # the SSE frames


async def streamed(
    chat: ChatService, request: ChatCompletionRequest, request_id: str, ctx: RequestContext | None = None
) -> Streamed:
    """A streamed answer: where it came from, and its server-sent events."""
    answer = await chat.answer(request, request_id, ctx or RequestContext())
    return Streamed(answer.routed, event_stream(answer))
