"""The parts of vLLM's OpenAI responses the pool reads, decoded with msgspec, and its answers (one JSON
body, or a stream of chunks) read as the tier's events."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import msgspec

from tiers._events import Event, Finished, Started, TextDelta
from tiers._types import Usage


class WireUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class WireMessage(msgspec.Struct):
    content: str | None = None


class WireChoice(msgspec.Struct):
    message: WireMessage | None = None
    finish_reason: str | None = None


class WireCompletion(msgspec.Struct):
    choices: list[WireChoice]
    model: str = ""
    usage: WireUsage | None = None


class WireDelta(msgspec.Struct):
    content: str | None = None


class WireChunkChoice(msgspec.Struct):
    delta: WireDelta | None = None
    finish_reason: str | None = None


class WireChunk(msgspec.Struct):
    choices: list[WireChunkChoice] = msgspec.field(default_factory=list)
    model: str = ""
    usage: WireUsage | None = None


class WireErrorBody(msgspec.Struct):
    message: str = ""


class WireError(msgspec.Struct):
    error: WireErrorBody | None = None
    message: str = ""  # older vLLM put the message at the top level


class WireModel(msgspec.Struct):
    id: str


class WireModelList(msgspec.Struct):
    data: list[WireModel]


completion_decoder = msgspec.json.Decoder(WireCompletion)
chunk_decoder = msgspec.json.Decoder(WireChunk)
error_decoder = msgspec.json.Decoder(WireError)
models_decoder = msgspec.json.Decoder(WireModelList)


def error_message(body: bytes) -> str:
    """The message of an OpenAI-shaped error body, or the body itself."""
    try:
        err = error_decoder.decode(body)
    except msgspec.DecodeError:
        return body[:300].decode("utf-8", "replace")
    if err.error is not None and err.error.message:
        return err.error.message
    return err.message or body[:300].decode("utf-8", "replace")


def body_events(body: bytes, instance: str, model: str) -> tuple[Event, ...]:
    """A chat completion's JSON body as events: :class:`Started`, its text in one piece, :class:`Finished`.
    Raises :class:`msgspec.DecodeError` for a body that is not one."""
    answer = completion_decoder.decode(body)
    choice = answer.choices[0]
    usage = answer.usage or WireUsage()
    text = choice.message.content if choice.message is not None else None
    return (
        Started(instance, answer.model or model),
        *((TextDelta(text),) if text else ()),
        Finished(choice.finish_reason or "stop", Usage(usage.prompt_tokens, usage.completion_tokens)),
    )


async def stream_events(
    chunks: AsyncIterator[bytes], instance: str, model: str
) -> AsyncGenerator[Event, None]:
    """A streamed chat completion (``stream_options.include_usage``), as the body's bytes arrive, as
    events: :class:`Started` with the first text (or at the end, for an answer without any), the text
    pieces, then :class:`Finished` once ``data: [DONE]`` came (or the body ended), with the last
    finish_reason and the usage chunk's counts. Raises what reading raises, and
    :class:`msgspec.DecodeError` for a chunk that is not one."""
    reason = "stop"
    usage: WireUsage | None = None
    answering = ""  # the model the chunks name
    started = False
    rest = b""
    reading = True
    source = aiter(chunks)
    while reading:
        try:
            *lines, rest = (rest + await anext(source)).split(b"\n")
        except StopAsyncIteration:
            lines, reading = [rest], False  # a last line without its newline
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                reading = False
                break
            chunk = chunk_decoder.decode(payload)
            answering = answering or chunk.model
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.finish_reason:
                    reason = choice.finish_reason
                if choice.delta is not None and choice.delta.content:
                    if not started:
                        started = True
                        yield Started(instance, answering or model)
                    yield TextDelta(choice.delta.content)
    if not started:
        yield Started(instance, answering or model)
    counted = Usage(usage.prompt_tokens, usage.completion_tokens) if usage else Usage(0, 0)
    yield Finished(reason, counted)
