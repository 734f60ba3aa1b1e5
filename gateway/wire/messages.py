"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``) as typed msgspec
models: the request, decoded strictly, and the answer's shapes.

Every field of the ``anthropic`` SDK's request types is in the inventory
(:mod:`gateway.wire.anthropic.fields`, checked against the installed SDK by
tests/gateway/wire/test_anthropic_fields.py): honoured here, or refused with Anthropic's own error.
A field no Anthropic type has is Anthropic's 400 ``<path>: Extra inputs are not permitted``
(:mod:`gateway.wire.anthropic.errors`); a block or tool of a type no tier here can take (documents,
server tools, containers, ...) is refused by its ``type``, with the inventory's message.  Every list
and string that can reach storage, logs or a tier has a bound, as on OpenAI's endpoints.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.wire.anthropic.errors import decode_anthropic
from gateway.wire.chat import MAX_TOOLS, Description, ModelName, Name
from tiers import Usage

MAX_MESSAGES = 4096  # as a chat request's
MAX_BLOCKS = 512  # content blocks in one message
MAX_STOP_SEQUENCES = 16
MAX_EXAMPLES = 32  # a tool's input_examples
ToolUseId = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]
Short = Annotated[str, msgspec.Meta(max_length=256)]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class CacheControl(_Strict, tag_field="type", tag="ephemeral"):
    """Anthropic's prompt-caching marker: accepted; the engines' prefix caches work without it."""

    ttl: Literal["5m", "1h"] | None = None


class TextBlock(_Strict, tag_field="type", tag="text"):
    text: str
    cache_control: CacheControl | None = None
    # An earlier answer's citations, sent back with it: kept as sent, never read.
    citations: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=64)] | None = None


class Base64Source(_Strict, tag_field="type", tag="base64"):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class URLSource(_Strict, tag_field="type", tag="url"):
    url: Annotated[str, msgspec.Meta(min_length=1, max_length=8192)]


class ImageTransformations(_Strict):
    oversized_image: Literal["downsize", "error"] | None = None


class ImageBlock(_Strict, tag_field="type", tag="image"):
    source: Base64Source | URLSource
    cache_control: CacheControl | None = None
    transformations: ImageTransformations | None = None


class DirectCaller(_Strict, tag_field="type", tag="direct"):
    pass


class ToolUseBlock(_Strict, tag_field="type", tag="tool_use"):
    """A tool call of an earlier answer, sent back by the client (``caller`` and ``toolset_name`` as
    the SDK's ``model_dump()`` gives them: null)."""

    id: ToolUseId
    name: Name
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: DirectCaller | None = None
    toolset_name: Short | None = None  # refused when set: no toolsets here


class ToolResultBlock(_Strict, tag_field="type", tag="tool_result"):
    tool_use_id: ToolUseId
    content: str | Annotated[list[TextBlock | ImageBlock], msgspec.Meta(max_length=MAX_BLOCKS)] = ""
    is_error: bool = False
    cache_control: CacheControl | None = None
    toolset_name: Short | None = None


class ThinkingBlock(_Strict, tag_field="type", tag="thinking"):
    """An earlier answer's thinking (another provider's: no tier here thinks), sent back: left out of
    the prompt, as Anthropic leaves earlier turns' thinking out of the context."""

    thinking: str
    signature: str


class RedactedThinkingBlock(_Strict, tag_field="type", tag="redacted_thinking"):
    data: str


Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock


class MessageParam(_Strict):
    role: Literal["user", "assistant", "system"]
    content: str | Annotated[list[Block], msgspec.Meta(max_length=MAX_BLOCKS)]


class Tool(_Strict):
    """A client tool: its arguments' JSON schema is ``input_schema``.  Server tools (``web_search_…``,
    ``bash_…``) have another ``type`` and no schema: a 400."""

    name: Name
    input_schema: dict[str, Any] | None = None  # required of a client tool (checked in translation)
    description: Description | None = None
    type: Annotated[str, msgspec.Meta(max_length=64)] | None = None  # "custom", or a server tool's
    cache_control: CacheControl | None = None
    strict: bool | None = None
    allowed_callers: (
        Annotated[list[Annotated[str, msgspec.Meta(max_length=64)]], msgspec.Meta(max_length=8)] | None
    ) = None
    defer_loading: bool | None = None
    eager_input_streaming: bool | None = None
    input_examples: Annotated[list[dict[str, Any]], msgspec.Meta(max_length=MAX_EXAMPLES)] | None = None


class ToolChoiceAuto(_Strict, tag_field="type", tag="auto"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(_Strict, tag_field="type", tag="any"):
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(_Strict, tag_field="type", tag="tool"):
    name: Name
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(_Strict, tag_field="type", tag="none"):
    pass


ToolChoice = ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool | ToolChoiceNone


class Thinking(_Strict):
    """Thinking: ``disabled`` is taken; the others are refused as Anthropic refuses them for a model
    that does not think (no tier's model here does)."""

    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    display: Annotated[str, msgspec.Meta(max_length=32)] | None = None


class Metadata(_Strict):
    user_id: Short | None = None


class JSONOutputFormat(_Strict, tag_field="type", tag="json_schema"):
    schema: dict[str, Any]


class OutputConfig(_Strict):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JSONOutputFormat | None = None


class Diagnostics(_Strict):
    previous_message_id: Short | None = None


class _Prompt(_Strict, kw_only=True):
    """What a create and a token count share: the conversation and what shapes its prompt."""

    model: ModelName
    messages: Annotated[list[MessageParam], msgspec.Meta(min_length=1, max_length=MAX_MESSAGES)]
    system: str | Annotated[list[TextBlock], msgspec.Meta(max_length=MAX_BLOCKS)] | None = None
    tools: Annotated[list[Tool], msgspec.Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    cache_control: CacheControl | None = None
    output_config: OutputConfig | None = None
    speed: Literal["standard", "fast"] | None = None


class CreateMessage(_Prompt, kw_only=True):
    """``POST /v1/messages``: ``max_tokens`` is required, as Anthropic requires it.  ``temperature``,
    ``top_p`` and ``top_k`` are no longer in the SDK's types (its newest models take none) but the API
    still takes them, and so does tiergate."""

    max_tokens: Annotated[int, msgspec.Meta(ge=1)]
    stream: bool = False
    stop_sequences: (
        Annotated[
            list[Annotated[str, msgspec.Meta(min_length=1, max_length=256)]],
            msgspec.Meta(max_length=MAX_STOP_SEQUENCES),
        ]
        | None
    ) = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0, le=1000)] | None = None
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = None
    container: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET  # refused when not null
    diagnostics: Diagnostics | None = None
    inference_geo: Annotated[str, msgspec.Meta(max_length=64)] | None = None


class CountTokens(_Prompt, kw_only=True):
    """``POST /v1/messages/count_tokens``: the prompt alone."""


_create = msgspec.json.Decoder(CreateMessage)
_count = msgspec.json.Decoder(CountTokens)


def parse_create(body: bytes) -> CreateMessage:
    return decode_anthropic(_create, body, "Messages API request")


def parse_count(body: bytes) -> CountTokens:
    return decode_anthropic(_count, body, "Messages API token-count request")


# -- the answer ------------------------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class TextOut(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class ToolUseOut(msgspec.Struct, tag_field="type", tag="tool_use"):
    id: str  # toolu_…
    name: str
    input: dict[str, Any]


class UsageOut(msgspec.Struct, omit_defaults=True):
    """As Anthropic counts: ``input_tokens`` are the prompt's tokens not read from or written to a
    cache (an Anthropic provider tier's prompt cache, or an engine's prefix cache: the chat answer's
    ``cached_tokens``); the cache fields only when not 0."""

    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @classmethod
    def of(cls, usage: Usage) -> UsageOut:
        uncached = usage.prompt_tokens - usage.cached_tokens - usage.cache_write_tokens
        return cls(uncached, usage.completion_tokens, usage.cache_write_tokens, usage.cached_tokens)


class TiergateInfo(msgspec.Struct, omit_defaults=True):
    """tiergate's own field, as on chat: the media the answer was made without."""

    degraded: list[str] = []


class CacheMissReason(msgspec.Struct, tag_field="type", tag="unavailable"):
    """Anthropic's reason when it cannot diagnose a cache miss: the only one here (no prompt cache
    keeps a previous request's fingerprint)."""


class DiagnosticsOut(msgspec.Struct):
    cache_miss_reason: CacheMissReason


class MessageOut(msgspec.Struct, tag_field="type", tag="message", omit_defaults=True, kw_only=True):
    id: str  # msg_…
    model: str
    content: list[TextOut | ToolUseOut]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: UsageOut
    role: Literal["assistant"]
    tiergate: TiergateInfo | msgspec.UnsetType = msgspec.UNSET
    diagnostics: DiagnosticsOut | msgspec.UnsetType = msgspec.UNSET  # when the request asked


class TokenCount(msgspec.Struct):
    input_tokens: int
