"""What tiergate answers on the OpenAI endpoints, as msgspec structs with pre-built encoders: the
``chat.completion`` body, its stream chunks, usage, logprobs, tool calls and model cards.  Every
answer validates against OpenAI's own OpenAPI description (tests/test_openai_schema.py)."""

from __future__ import annotations

import secrets

import msgspec

from tiers import TokenLogprob, Usage

UNSET = msgspec.UNSET


class FunctionCallBody(msgspec.Struct):
    name: str
    arguments: str


class ToolCallBody(msgspec.Struct):
    id: str
    function: FunctionCallBody
    type: str = "function"


class ResponseMessage(msgspec.Struct):
    content: str | None
    role: str = "assistant"
    tool_calls: list[ToolCallBody] | msgspec.UnsetType = UNSET  # UNSET: left out
    refusal: None = None  # OpenAI always sends the key (null); clients' models require it


class TopLogprobBody(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None


class TokenLogprobBody(msgspec.Struct):
    token: str
    logprob: float
    bytes: list[int] | None
    top_logprobs: list[TopLogprobBody]


class ChoiceLogprobs(msgspec.Struct):
    content: list[TokenLogprobBody] | None
    refusal: None = None


def logprobs_body(tokens: list[TokenLogprob] | None) -> ChoiceLogprobs | None:
    if tokens is None:
        return None
    return ChoiceLogprobs(
        [
            TokenLogprobBody(
                t.token, t.logprob, t.bytes, [TopLogprobBody(a.token, a.logprob, a.bytes) for a in t.top]
            )
            for t in tokens
        ]
    )


class Choice(msgspec.Struct):
    index: int
    message: ResponseMessage
    finish_reason: str
    logprobs: ChoiceLogprobs | None = None


class PromptTokensDetails(msgspec.Struct):
    cached_tokens: int = 0
    audio_tokens: int = 0


class CompletionTokensDetails(msgspec.Struct, frozen=True):
    reasoning_tokens: int = 0
    audio_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


_NO_COMPLETION_DETAILS = CompletionTokensDetails()


class UsageBody(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = msgspec.field(default_factory=PromptTokensDetails)
    completion_tokens_details: CompletionTokensDetails = _NO_COMPLETION_DETAILS


def usage_body(usage: Usage) -> UsageBody:
    return UsageBody(
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.total_tokens,
        PromptTokensDetails(usage.cached_tokens),
    )


class TiergateInfo(msgspec.Struct, omit_defaults=True):
    """tiergate's own field in a response (``"tiergate": {...}``); absent when it has nothing to say."""

    degraded: list[str] = msgspec.field(default_factory=list)


class ChatCompletion(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[Choice]
    usage: UsageBody
    object: str = "chat.completion"
    system_fingerprint: str | None = None
    tiergate: TiergateInfo | msgspec.UnsetType = UNSET


class FunctionDelta(msgspec.Struct, omit_defaults=True):
    name: str | msgspec.UnsetType = UNSET
    arguments: str = ""


class ToolCallChunk(msgspec.Struct, omit_defaults=True):
    index: int
    id: str | msgspec.UnsetType = UNSET
    type: str | msgspec.UnsetType = UNSET
    function: FunctionDelta | msgspec.UnsetType = UNSET


class DeltaBody(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None
    tool_calls: list[ToolCallChunk] | msgspec.UnsetType = UNSET


class ChunkChoice(msgspec.Struct):
    index: int
    delta: DeltaBody
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None


class ChatCompletionChunk(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    object: str = "chat.completion.chunk"
    system_fingerprint: str | None = None
    usage: UsageBody | None = None
    tiergate: TiergateInfo | msgspec.UnsetType = UNSET
    # Random padding of random length (stream_options.include_obfuscation): a delta's size then
    # says less about its text to someone who sees only the encrypted stream.
    obfuscation: str | msgspec.UnsetType = UNSET


def obfuscation() -> str:
    """1 to 32 random URL-safe characters, as OpenAI's ``obfuscation`` field carries."""
    return secrets.token_urlsafe(24)[: 1 + secrets.randbelow(32)]


# What a chat model (a tier, tiergate-auto, an alias of either) serves; /v1/models lists it per model.
CHAT_ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/completions")


class ModelCard(msgspec.Struct):
    id: str
    created: int
    owned_by: str = "tiergate"
    object: str = "model"
    endpoints: tuple[str, ...] = CHAT_ENDPOINTS  # tiergate's own field: the endpoints that take it


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: str = "list"
