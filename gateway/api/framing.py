"""Stage 9, frame: an answer's events as OpenAI's JSON body, or as its server-sent events."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

import msgspec
from litestar.types import Scope

from gateway.api.sse import ChunkWriter
from gateway.pipeline.answer import Answer, Routed
from gateway.wire.chat import encode
from gateway.wire.chat_response import (
    ChatCompletion,
    Choice,
    FunctionCallBody,
    ResponseMessage,
    TiergateInfo,
    ToolCallBody,
    logprobs_body,
    usage_body,
)
from tiers import collect

VERSION = "0.1.0"  # keep in step with pyproject.toml (the fingerprint names it)


def tiergate_info(answer: Answer) -> TiergateInfo | msgspec.UnsetType:
    degraded = answer.routed.degraded
    return TiergateInfo(degraded=list(degraded)) if degraded else msgspec.UNSET


def fingerprint(answer: Answer) -> str:
    """``system_fingerprint``: what served the answer (gateway version, tier, model); a change in it
    tells a client that seeded answers may differ."""
    return f"tiergate-{VERSION}:{answer.routed.tier}:{answer.model}"


async def completion(answer: Answer) -> ChatCompletion:
    """The whole answer as a ``chat.completion`` object."""
    result = await collect(answer.events)
    choices = []
    for c in result.choices:
        calls = [ToolCallBody(t.id, FunctionCallBody(t.name, t.arguments)) for t in c.tool_calls]
        message = ResponseMessage(c.text if c.text or not calls else None, tool_calls=calls or msgspec.UNSET)
        choices.append(Choice(c.index, message, c.finish_reason, logprobs_body(c.logprobs)))
    return ChatCompletion(
        id=answer.completion_id,
        created=int(time.time()),
        model=answer.model,
        choices=choices,
        usage=usage_body(result.usage),
        system_fingerprint=fingerprint(answer),
        tiergate=tiergate_info(answer),
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
        info=tiergate_info(answer),
        fingerprint=fingerprint(answer),
        choices=answer.choices,
        obfuscate=answer.obfuscate,
    )
    events = answer.events
    try:
        first = await anext(events)
        async for chunk in writer.events(first, events):
            yield chunk
    finally:
        await events.aclose()


def route_headers(routed: Routed) -> dict[str, str]:
    headers = {
        "X-Tiergate-Tier": routed.tier,
        "X-Tiergate-Route-Reason": routed.reason,
        "X-Tiergate-Cache": routed.cache.value,
        # Time in the gateway until the answer (or its first byte) was ready, and in the cache.
        "Server-Timing": f"gateway;dur={routed.server_s * 1000:.3f}, cache;dur={routed.cache_s * 1000:.3f}",
    }
    if routed.embed_s:  # the semantic cache embedded the last user turn (MiniLM)
        headers["Server-Timing"] += f", embed;dur={routed.embed_s * 1000:.3f}"
    if routed.similarity is not None:
        headers["X-Tiergate-Similarity"] = f"{routed.similarity:.3f}"
    if routed.instance:
        headers["X-Tiergate-Instance"] = routed.instance
    if routed.predicted:
        headers["X-Tiergate-Predicted"] = routed.predicted
    if routed.degraded:
        headers["X-Tiergate-Degraded"] = ",".join(routed.degraded)
    return headers


PIPELINE_HEADERS = frozenset(
    (
        b"authorization",
        b"x-api-key",
        b"cache-control",
        b"x-session-id",
        b"content-length",
        b"x-tiergate-tags",
        b"anthropic-user-profile-id",  # the Messages API's (gateway/api/messages/controllers.py)
        b"anthropic-workspace-id",
    )
)


def chat_headers(scope: Scope) -> dict[str, str]:
    """The few headers the chat path reads, from one scan of the raw ASGI headers: cheaper than
    building ``request.headers`` (a full case-insensitive mapping) on the hot path."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name in PIPELINE_HEADERS:
            key, text = name.decode("latin-1"), value.decode("latin-1")
            if key in headers and name == b"x-tiergate-tags":  # sent twice: both count
                text = f"{headers[key]},{text}"
            headers[key] = text
    return headers
