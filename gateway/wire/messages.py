"""Anthropic's Messages API (``POST /v1/messages``, ``/v1/messages/count_tokens``) as typed msgspec
models: the request, decoded strictly, and the answer's shapes.

As for OpenAI's endpoints (:mod:`gateway.wire.chat`), a field tiergate does not know is a 400 naming
it, and every list and string that can reach storage, logs or a tier has a bound.  What Anthropic's
clients send as a matter of course and that changes nothing here is accepted: ``cache_control`` on
any block (no prompt caching to steer; the result cache is the gateway's own), ``citations`` on a text
block sent back, ``thinking`` (no tier's model reasons), ``service_tier`` (one tier of service).
What no tier can do (documents, server tools such as web search, ``output_config``, containers, MCP
servers) is refused: its ``type`` or field is a 400.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.wire.chat import MAX_TOOLS, Description, ModelName, Name
from gateway.wire.decoding import decode_body

MAX_MESSAGES = 4096  # as a chat request's
MAX_BLOCKS = 512  # content blocks in one message
MAX_STOP_SEQUENCES = 16
ToolUseId = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_-]+$")]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class CacheControl(_Strict):
    """Anthropic's prompt-caching marker: accepted, and nothing to do here."""

    type: Literal["ephemeral"]
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


class ImageBlock(_Strict, tag_field="type", tag="image"):
    source: Base64Source | URLSource
    cache_control: CacheControl | None = None


class ToolUseBlock(_Strict, tag_field="type", tag="tool_use"):
    """A tool call of an earlier answer, sent back by the client."""

    id: ToolUseId
    name: Name
    input: dict[str, Any]
    cache_control: CacheControl | None = None
    caller: dict[str, Any] | None = None  # the SDK echoes it back (null) with the block it got


class ToolResultBlock(_Strict, tag_field="type", tag="tool_result"):
    tool_use_id: ToolUseId
    content: str | Annotated[list[TextBlock | ImageBlock], msgspec.Meta(max_length=MAX_BLOCKS)] = ""
    is_error: bool = False
    cache_control: CacheControl | None = None


Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock


class MessageParam(_Strict):
    role: Literal["user", "assistant"]
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
    """Extended thinking: accepted and left unused, as no tier's model reasons (no thinking blocks)."""

    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    display: str | None = None


class Metadata(_Strict):
    user_id: Annotated[str, msgspec.Meta(max_length=256)] | None = None


class _Prompt(_Strict, kw_only=True):
    """What a create and a token count share: the conversation and what shapes its prompt."""

    model: ModelName
    messages: Annotated[list[MessageParam], msgspec.Meta(min_length=1, max_length=MAX_MESSAGES)]
    system: str | Annotated[list[TextBlock], msgspec.Meta(max_length=MAX_BLOCKS)] | None = None
    tools: Annotated[list[Tool], msgspec.Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None


class CreateMessage(_Prompt, kw_only=True):
    """``POST /v1/messages``: ``max_tokens`` is required, as Anthropic requires it."""

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


class CountTokens(_Prompt, kw_only=True):
    """``POST /v1/messages/count_tokens``: the prompt alone."""


_create = msgspec.json.Decoder(CreateMessage)
_count = msgspec.json.Decoder(CountTokens)


def parse_create(body: bytes) -> CreateMessage:
    return decode_body(_create, body, "Messages API request")


def parse_count(body: bytes) -> CountTokens:
    return decode_body(_count, body, "Messages API token-count request")


# -- the answer ------------------------------------------------------------------------------------

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use", "refusal"]


class TextOut(msgspec.Struct, tag_field="type", tag="text"):
    text: str


class ToolUseOut(msgspec.Struct, tag_field="type", tag="tool_use"):
    id: str  # toolu_…
    name: str
    input: dict[str, Any]


class UsageOut(msgspec.Struct):
    input_tokens: int
    output_tokens: int


class TiergateInfo(msgspec.Struct, omit_defaults=True):
    """tiergate's own field, as on chat: the media the answer was made without."""

    degraded: list[str] = []


class MessageOut(msgspec.Struct, tag_field="type", tag="message", omit_defaults=True, kw_only=True):
    id: str  # msg_…
    model: str
    content: list[TextOut | ToolUseOut]
    stop_reason: StopReason | None
    stop_sequence: str | None
    usage: UsageOut
    role: Literal["assistant"]
    tiergate: TiergateInfo | msgspec.UnsetType = msgspec.UNSET


class TokenCount(msgspec.Struct):
    input_tokens: int
