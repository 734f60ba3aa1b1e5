"""The parts of vLLM's OpenAI responses the pool reads, decoded with msgspec."""

from __future__ import annotations

import msgspec


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
