"""Stage 9, frame: an answer's events as OpenAI's JSON body, or as its server-sent events."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

import msgspec

from gateway.api.protocol import ChatCompletion, Choice, ResponseMessage, TiergateInfo, UsageBody, encode
from gateway.api.sse import ChunkWriter
from gateway.pipeline.answer import Answer
from tiers import collect


def _info(answer: Answer) -> TiergateInfo | msgspec.UnsetType:
    degraded = answer.routed.degraded
    return TiergateInfo(degraded=list(degraded)) if degraded else msgspec.UNSET


async def completion(answer: Answer) -> ChatCompletion:
    """The whole answer as a ``chat.completion`` object."""
    result = await collect(answer.events)
    usage = result.usage
    return ChatCompletion(
        id=answer.completion_id,
        created=int(time.time()),
        model=answer.model,
        choices=[Choice(0, ResponseMessage(result.text), result.finish_reason)],
        usage=UsageBody(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
        tiergate=_info(answer),
    )


async def json_body(answer: Answer) -> bytes:
    return encode(await completion(answer))


async def event_stream(answer: Answer) -> AsyncGenerator[bytes, None]:
    """``chat.completion.chunk`` events, then ``data: [DONE]``; however it ends (the client gone
    included), the answer's events are closed, and with them the tier's generation."""
    writer = ChunkWriter(
        answer.completion_id,
        int(time.time()),
        answer.model,
        include_usage=answer.include_usage,
        info=_info(answer),
    )
    events = answer.events
    try:
        first = await anext(events)
        async for chunk in writer.events(first, events):
            yield chunk
    finally:
        await events.aclose()
