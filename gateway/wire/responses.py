"""The Responses API request (``POST /v1/responses``) as typed msgspec models, decoded strictly.

As for Chat Completions (:mod:`gateway.wire.chat`), a field tiergate does not know is a 400 naming
it, and every list and string has a bound.  A field OpenAI defines that no tier here can honour
(built-in tools, ``truncation: "auto"``, reasoning effort, background runs) is a 400 naming it too,
never accepted and ignored.  ``input`` items are decoded one by one by their ``type`` (a message may
leave it out), so that an item of an unknown type is named by its index.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire import fields
from gateway.wire.chat import (
    MAX_TOOLS,
    MAX_TOP_LOGPROBS,
    NULL_RAW,
    Description,
    Effort,
    MetadataKey,
    MetadataValue,
    ModelName,
    Name,
    Probability,
    PromptCacheOptions,
    RefusedField,
    ShortText,
)
from gateway.wire.decoding import decode_body, decode_error
from gateway.wire.places import place_of

MAX_ITEMS = 2048  # input items in one request (Chat Completions takes 4,096 messages)
MAX_PARTS = 512  # content parts of one item
MAX_LOGPROBS = 16_384  # logprobs of one output_text sent back (a token each)
CallId = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
ItemId = Annotated[str, msgspec.Meta(max_length=128)]
ItemStatus = Literal["in_progress", "completed", "incomplete"]


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    pass


class InputText(_Strict, tag_field="type", tag="input_text"):
    text: str


class InputImage(_Strict, tag_field="type", tag="input_image"):
    image_url: str | None = None
    file_id: str | None = None  # no Files API here: a 400 when set
    detail: Literal["auto", "low", "high"] = "auto"


class LogProbItem(msgspec.Struct):
    """A logprob of an output_text part sent back as input (kept as sent, not read)."""

    token: str
    logprob: float
    bytes: Annotated[list[int], msgspec.Meta(max_length=256)] | None = None  # one token's UTF-8
    top_logprobs: Annotated[list[Any], msgspec.Meta(max_length=MAX_TOP_LOGPROBS)] | None = None


class OutputText(_Strict, tag_field="type", tag="output_text"):
    """An earlier answer's text, sent back by a client that keeps the conversation itself."""

    text: str
    annotations: Annotated[list[Any], msgspec.Meta(max_length=0)] = []
    logprobs: Annotated[list[LogProbItem], msgspec.Meta(max_length=MAX_LOGPROBS)] | None = None


class Refusal(_Strict, tag_field="type", tag="refusal"):
    refusal: str


Part = InputText | InputImage | OutputText | Refusal


class MessageItem(_Strict, tag_field="type", tag="message"):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | Annotated[list[Part], msgspec.Meta(max_length=MAX_PARTS)]
    id: ItemId | None = None
    status: ItemStatus | None = None
    phase: None = None  # OpenAI's SDK sends it (null) when it dumps a message it got


class FunctionCallItem(_Strict, tag_field="type", tag="function_call"):
    call_id: CallId
    name: Name
    arguments: str
    id: ItemId | None = None
    status: ItemStatus | None = None
    # What OpenAI's SDK sends (null) when it dumps a call it got; no tier here makes such calls.
    namespace: None = None
    caller: None = None
    async_: None = msgspec.field(default=None, name="async")


class FunctionCallOutputItem(_Strict, tag_field="type", tag="function_call_output"):
    call_id: CallId
    output: str | Annotated[list[InputText], msgspec.Meta(max_length=MAX_PARTS)]
    id: ItemId | None = None
    status: ItemStatus | None = None


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem
_ITEM_TYPES: dict[str, type[Item]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
}


class FunctionTool(_Strict, tag_field="type", tag="function"):
    name: Name
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    description: Description | None = None


class ChosenFunction(_Strict, tag_field="type", tag="function"):
    name: Name


class TextFormat(_Strict, tag_field="type", tag="text"):
    pass


class JsonObjectFormat(_Strict, tag_field="type", tag="json_object"):
    pass


class JsonSchemaFormat(_Strict, tag_field="type", tag="json_schema"):
    name: Name
    schema: dict[str, Any]
    strict: bool | None = None
    description: Description | None = None


class TextOptions(_Strict):
    format: TextFormat | JsonObjectFormat | JsonSchemaFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # only medium here (check_fields)


class Reasoning(_Strict):
    """No model here reasons: ``effort`` goes on as Chat Completions' ``reasoning_effort`` (vLLM
    hands it to the chat template) and the answer is what it would be at ``none``; no summary."""

    effort: Effort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None  # the old name of summary


class StreamOptions(_Strict):
    include_obfuscation: bool | None = None


Include = Literal["message.output_text.logprobs"]


class ResponsesRequest(_Strict, kw_only=True):
    model: ModelName
    input: str | Annotated[list[msgspec.Raw], msgspec.Meta(max_length=MAX_ITEMS)]
    instructions: str | None = None
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    include: Annotated[list[Include], msgspec.Meta(max_length=8)] | None = None
    tools: Annotated[list[msgspec.Raw], msgspec.Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | ChosenFunction | None = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    metadata: Annotated[dict[MetadataKey, MetadataValue], msgspec.Meta(max_length=16)] | None = None
    store: bool | None = None  # None: true, as OpenAI's default
    stream: bool | None = False
    previous_response_id: Annotated[str, msgspec.Meta(max_length=128)] | None = None
    user: ShortText | None = None
    truncation: Literal["disabled"] | None = None
    reasoning: Reasoning | None = None
    background: Literal[False] | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    safety_identifier: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    prompt_cache_key: Annotated[str, msgspec.Meta(max_length=1024)] | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    max_tool_calls: Annotated[int, msgspec.Meta(ge=0)] | None = None
    stream_options: StreamOptions | None = None
    # Refused when present (gateway/wire/fields.py): kept raw, never built into Python objects.
    prompt: RefusedField = msgspec.UNSET
    conversation: RefusedField = msgspec.UNSET
    context_management: RefusedField = msgspec.UNSET
    moderation: RefusedField = msgspec.UNSET

    def __post_init__(self) -> None:
        if self.stream is None:  # nullable in OpenAI's spec: null is the field left out
            self.stream = False
        for name in ("prompt", "conversation", "context_management", "moderation"):
            if getattr(self, name) == NULL_RAW:
                setattr(self, name, msgspec.UNSET)

    @property
    def stored(self) -> bool:
        return self.store is not False

    @property
    def logprobs(self) -> bool:
        return "message.output_text.logprobs" in (self.include or ()) or bool(self.top_logprobs)

    @property
    def format(self) -> TextFormat | JsonObjectFormat | JsonSchemaFormat:
        return (self.text.format if self.text else None) or TextFormat()


class _Kind(msgspec.Struct):
    type: str = "message"


class _Scanned(ResponsesRequest, kw_only=True):
    """The request as its bounds are scanned (gateway/wire/bounds.py): its raw input items and tools
    in the types they are decoded as, one by one, after.  Never decoded nor built: only read by
    :func:`gateway.wire.places.place_of`, so its fields may narrow the ``Raw`` of the request's."""

    input: str | Annotated[list[Item], msgspec.Meta(max_length=MAX_ITEMS)]  # type: ignore[assignment]
    tools: Annotated[list[FunctionTool], msgspec.Meta(max_length=MAX_TOOLS)] | None = None  # type: ignore[assignment]


_request = msgspec.json.Decoder(ResponsesRequest)
_kind = msgspec.json.Decoder(_Kind)
_items = {name: msgspec.json.Decoder(cls) for name, cls in _ITEM_TYPES.items()}
_tool = msgspec.json.Decoder(FunctionTool)


def _decode(decoder: msgspec.json.Decoder[Any], raw: bytes, where: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        error = decode_error(exc)
        param = f"{where}.{error.param}" if error.param else where
        raise InvalidRequest(
            f"{where}: {error}".replace("invalid request: ", ""), param=param, code=error.code
        ) from exc


def _kind_of(raw: bytes, where: str, known: set[str], what: str) -> str:
    kind = _decode(_kind, raw, where).type
    if kind not in known:
        raise InvalidRequest(
            f"{where}: {what} of type {kind[:40]!r} are not supported here (only {', '.join(sorted(known))})",
            param=f"{where}.type",
        )
    return str(kind)


def parse_responses_request(body: bytes) -> tuple[ResponsesRequest, list[Item], list[FunctionTool]]:
    """The request, its input items (a string input is one user message) and its function tools."""
    request = decode_body(
        _request, body, "Responses API request", place_of(_Scanned, frozenset({"input", "tools"}))
    )
    if isinstance(request.input, str):
        items: list[Item] = [MessageItem(role="user", content=request.input)]
    else:
        items = []
        for i, raw in enumerate(request.input):
            where = f"input[{i}]"
            kind = _kind_of(raw, where, set(_ITEM_TYPES), "items")
            items.append(_decode(_items[kind], raw, where))
    tools = []
    for i, raw in enumerate(request.tools or ()):
        _kind_of(raw, f"tools[{i}]", {"function"}, "tools")
        tools.append(_decode(_tool, raw, f"tools[{i}]"))
    _check(request, items, tools)
    return request, items, tools


def _check(request: ResponsesRequest, items: list[Item], tools: list[FunctionTool]) -> None:
    fields.refuse(request, fields.RESPONSES)
    verbosity = request.text.verbosity if request.text else None
    cache_mode = request.prompt_cache_options.mode if request.prompt_cache_options else None
    fields.check_values(verbosity, request.prompt_cache_retention, cache_mode, prefix="text.")
    if not items and request.previous_response_id is None:
        raise InvalidRequest(
            "input is empty: send a message or continue with previous_response_id", param="input"
        )
    for i, item in enumerate(items):
        if isinstance(item, MessageItem) and not isinstance(item.content, str):
            for j, part in enumerate(item.content):
                if isinstance(part, InputImage) and (part.file_id is not None or part.image_url is None):
                    raise InvalidRequest(
                        f"input[{i}].content[{j}]: send the image as image_url (a URL or a data: URI); "
                        "this gateway has no Files API",
                        param=f"input[{i}].content[{j}].file_id",
                    )
    if request.top_logprobs and not request.logprobs:
        raise InvalidRequest(
            "top_logprobs needs include: ['message.output_text.logprobs']", param="top_logprobs"
        )
    if request.tool_choice is not None and request.tool_choice != "none" and not tools:
        raise InvalidRequest("tool_choice is only allowed when tools are specified", param="tool_choice")
