"""The parts of vLLM's OpenAI answers the pool reads, as msgspec structs: a JSON body, a stream chunk,
an error, the model list.  Read as the tier's events in :mod:`tiers.cloud._wire`; the end token is
dropped from their counts and logprobs in :mod:`tiers.cloud._eos`."""

from __future__ import annotations

import msgspec

from tiers._types import Usage


class WirePromptDetails(msgspec.Struct):
    cached_tokens: int | None = 0


class WireUsage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: WirePromptDetails | None = None

    def usage(self) -> Usage:
        details = self.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details is not None else 0
        return Usage(self.prompt_tokens, self.completion_tokens, cached)


class WireFunction(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class WireToolCall(msgspec.Struct):
    index: int = 0
    id: str | None = None
    function: WireFunction | None = None


class WireTop(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None = None


class WireTokenLogprob(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[WireTop] = msgspec.field(default_factory=list)


class WireLogprobs(msgspec.Struct):
    content: list[WireTokenLogprob] | None = None
    # /v1/completions' format: one entry per token in each list.
    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None


class WireMessage(msgspec.Struct):
    content: str | None = None
    tool_calls: list[WireToolCall] | None = None


class WireChoice(msgspec.Struct):
    index: int = 0
    message: WireMessage | None = None
    text: str | None = None  # /v1/completions
    finish_reason: str | None = None
    # vLLM's: the stop string or token id; null at the end token (_eos.py); absent from other servers
    stop_reason: int | str | msgspec.UnsetType | None = msgspec.UNSET
    logprobs: WireLogprobs | None = None


class WireCompletion(msgspec.Struct):
    choices: list[WireChoice]
    model: str = ""
    usage: WireUsage | None = None


class WireErrorBody(msgspec.Struct):
    message: str = ""


class WireChunkChoice(msgspec.Struct):
    index: int = 0
    delta: WireMessage | None = None
    text: str | None = None  # /v1/completions
    finish_reason: str | None = None
    stop_reason: int | str | msgspec.UnsetType | None = msgspec.UNSET
    logprobs: WireLogprobs | None = None


class WireChunk(msgspec.Struct):
    choices: list[WireChunkChoice] = msgspec.field(default_factory=list)
    model: str = ""
    usage: WireUsage | None = None
    error: WireErrorBody | None = None  # vLLM's error event in the middle of a stream


class WireError(msgspec.Struct):
    error: WireErrorBody | None = None
    message: str = ""  # older vLLM put the message at the top level


class WireModel(msgspec.Struct):
    id: str


class WireModelList(msgspec.Struct):
    data: list[WireModel]
