"""The OpenAI Chat Completions request as typed msgspec models, in one place.

Requests are decoded and validated here, strictly: a field tiergate does not know is a 400 naming it
(as OpenAI answers), never dropped, and every string, list and map that can reach storage, logs or a
tier has a bound.  What a model cannot say (a tool_choice naming no tool, top_logprobs without
logprobs, a schema that is no schema) is checked after decoding; JSON schemas are checked by
:mod:`gateway.wire.schemas`.  Answers are in :mod:`gateway.wire.chat_response`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire import fields, schemas
from gateway.wire.decoding import decode_body

Role = Literal["system", "developer", "user", "assistant", "tool"]

# Bounds: OpenAI's own where it states them (function names, metadata, tools, stop sequences).
Name = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]{1,64}$")]
ModelName = Annotated[str, msgspec.Meta(min_length=1, max_length=256, pattern=r"^[^\x00-\x1f\x7f]*$")]
ShortText = Annotated[str, msgspec.Meta(max_length=256)]
Description = Annotated[str, msgspec.Meta(max_length=8192)]
MAX_TOOLS = 128
MAX_PARTS = 1024  # content parts of one message (OpenAI states none; media parts: media.max_parts)
MAX_CHOICES = 8  # the edge samples the n answers one after another
MAX_TOP_LOGPROBS = 20


class _Strict(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A part of the request: unknown fields are refused, defaults left out when re-encoded."""


class _Typed(msgspec.Struct, forbid_unknown_fields=True):
    """A part whose ``type`` is always sent on, though it has one value: engines require it."""


class TextPart(_Strict, tag_field="type", tag="text"):
    text: str


class ImageURL(_Strict):
    url: str
    detail: Literal["auto", "low", "high"] = "auto"


class ImagePart(_Strict, tag_field="type", tag="image_url"):
    image_url: ImageURL


class InputAudio(_Strict):
    data: str
    format: Annotated[str, msgspec.Meta(max_length=16)]


class AudioPart(_Strict, tag_field="type", tag="input_audio"):
    input_audio: InputAudio


class VideoURL(_Strict):
    url: str


class VideoPart(_Strict, tag_field="type", tag="video_url"):
    video_url: VideoURL


ContentPart = TextPart | ImagePart | AudioPart | VideoPart


class FramesPart(msgspec.Struct, tag_field="type", tag="video_frames"):
    """A video after preprocessing: its sampled frames (``data:`` URIs) and what was measured.

    The gateway's own part, never decoded from a client (it is not in :data:`ContentPart`); it
    becomes image parts (and an audio part) in the form the engine accepts when sent to a tier.
    """

    frames: list[ImageURL]
    times: list[float]  # seconds from the start of each frame
    seconds: float
    fps: float
    audio: InputAudio | None = None  # the audio track, when a tier takes audio


class CalledFunction(_Strict):
    name: Name
    arguments: str  # JSON text, as the model produced it


class ToolCallIn(_Typed):
    """A tool call of an earlier assistant turn, sent back by the client."""

    id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    function: CalledFunction
    type: Literal["function"] = "function"


class Message(_Strict):
    role: Role
    content: str | Annotated[list[ContentPart], msgspec.Meta(max_length=MAX_PARTS)] | None = None
    name: Name | None = None
    tool_calls: Annotated[list[ToolCallIn], msgspec.Meta(max_length=MAX_TOOLS)] | None = None  # assistant
    tool_call_id: Annotated[str, msgspec.Meta(max_length=128)] | None = None  # tool
    refusal: str | None = None  # assistant: sent back as the client got it


class StreamOptions(_Strict):
    include_usage: bool = False
    include_obfuscation: bool | None = None  # None: off here (OpenAI's default is on; docs/api.md)


class PromptCacheOptions(_Strict):
    ttl: Literal["30m"] | None = None
    mode: Literal["implicit", "explicit"] | None = None  # explicit: refused (_check_fields)


# A refused field (gateway/wire/fields.py): its JSON kept as bytes, never built into Python objects;
# absent, or null once decoded (__post_init__), it is UNSET, which re-encoding leaves out.
RefusedField = msgspec.Raw | msgspec.UnsetType

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class FunctionDef(_Strict):
    name: Name
    description: Description | None = None
    parameters: dict[str, Any] | None = None  # a JSON schema of an object
    strict: bool | None = None


class Tool(_Typed):
    function: FunctionDef
    type: Literal["function"] = "function"


class ChosenFunction(_Strict):
    name: Name


class NamedToolChoice(_Typed):
    function: ChosenFunction
    type: Literal["function"] = "function"


class TextFormat(_Strict, tag_field="type", tag="text"):
    pass


class JsonObjectFormat(_Strict, tag_field="type", tag="json_object"):
    pass


class JsonSchemaSpec(_Strict):
    name: Name
    description: Description | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None


class JsonSchemaFormat(_Strict, tag_field="type", tag="json_schema"):
    json_schema: JsonSchemaSpec


ResponseFormat = TextFormat | JsonObjectFormat | JsonSchemaFormat

Probability = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]
Bias = Annotated[float, msgspec.Meta(ge=-100.0, le=100.0)]
MetadataKey = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[^\x00-\x1f\x7f]*$")]
MetadataValue = Annotated[str, msgspec.Meta(max_length=512, pattern=r"^[^\x00-\x1f\x7f]*$")]


class ChatCompletionRequest(_Strict, kw_only=True):
    model: ModelName
    messages: Annotated[list[Message], msgspec.Meta(min_length=1, max_length=4096)]
    stream: bool | None = False  # null: left out (as every nullable field), see __post_init__
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    n: Annotated[int, msgspec.Meta(ge=1, le=MAX_CHOICES)] | None = 1
    stop: (
        Annotated[str, msgspec.Meta(max_length=256)]
        | Annotated[list[ShortText], msgspec.Meta(max_length=4)]
        | None
    ) = None
    seed: Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] | None = None  # OpenAI's: int64
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    logit_bias: Annotated[dict[str, Bias], msgspec.Meta(max_length=1024)] | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: Annotated[list[Tool], msgspec.Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    # metadata is kept with the ledger row (cost by tag); store, service_tier and user are validated
    # and accepted as OpenAI's clients send them, and change nothing here (no stored completions, one
    # service tier, no per-user behaviour).
    metadata: Annotated[dict[MetadataKey, MetadataValue], msgspec.Meta(max_length=16)] | None = None
    store: bool | None = None
    service_tier: Literal["auto", "default", "flex", "scale", "priority"] | None = None
    user: ShortText | None = None
    safety_identifier: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    prompt_cache_key: Annotated[str, msgspec.Meta(max_length=1024)] | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None  # 24h: refused (_check_fields)
    prompt_cache_options: PromptCacheOptions | None = None
    modalities: Annotated[list[Literal["text", "audio"]], msgspec.Meta(max_length=2)] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None  # only medium here (_check_fields)
    reasoning_effort: Effort | None = None
    # Refused when present (gateway/wire/fields.py): kept raw, never built into Python objects.
    audio: RefusedField = msgspec.UNSET
    web_search_options: RefusedField = msgspec.UNSET
    prediction: RefusedField = msgspec.UNSET
    moderation: RefusedField = msgspec.UNSET
    functions: RefusedField = msgspec.UNSET
    function_call: RefusedField = msgspec.UNSET
    # vLLM's sampling extras, honoured by every tier.
    top_k: Annotated[int, msgspec.Meta(ge=-1, le=1000)] | None = None
    min_p: Probability | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0.0, le=2.0)] | None = None
    min_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    ignore_eos: bool | None = None
    stop_token_ids: (
        Annotated[list[Annotated[int, msgspec.Meta(ge=0)]], msgspec.Meta(max_length=16)] | None
    ) = None

    def __post_init__(self) -> None:
        # OpenAI's spec marks these nullable: null is the field left out.
        if self.n is None:
            self.n = 1
        if self.stream is None:
            self.stream = False
        for name in _REFUSED_RAW:
            if getattr(self, name) == NULL_RAW:
                setattr(self, name, msgspec.UNSET)

    @property
    def choices(self) -> int:
        """``n``: how many answers."""
        return self.n or 1

    @property
    def streamed(self) -> bool:
        return bool(self.stream)

    @property
    def obfuscated(self) -> bool:
        """The client asked for ``obfuscation`` padding on stream chunks."""
        return self.stream_options is not None and bool(self.stream_options.include_obfuscation)

    @property
    def output_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def uses_tools(self) -> bool:
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def format_type(self) -> str:
        """ "text", "json_object" or "json_schema"."""
        return "text" if self.response_format is None else _FORMAT_TYPES[type(self.response_format)]

    @property
    def token_bias(self) -> dict[int, float]:
        return {int(k): v for k, v in (self.logit_bias or {}).items()}


_REFUSED_RAW = ("audio", "web_search_options", "prediction", "moderation", "functions", "function_call")
NULL_RAW = msgspec.Raw(b"null")

_FORMAT_TYPES = {TextFormat: "text", JsonObjectFormat: "json_object", JsonSchemaFormat: "json_schema"}
_request_decoder = msgspec.json.Decoder(ChatCompletionRequest)


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    """Decode and validate a chat completion request body."""
    request = decode_body(_request_decoder, body, "chat completion request")
    check_chat_request(request)
    return request


def check_chat_request(request: ChatCompletionRequest) -> None:
    """What the types cannot say about a request (also for one translated from another endpoint)."""
    fields.refuse(request, fields.CHAT)
    cache_mode = request.prompt_cache_options.mode if request.prompt_cache_options else None
    fields.check_values(request.verbosity, request.prompt_cache_retention, cache_mode)
    if request.modalities and "audio" in request.modalities:
        raise fields.unsupported_value("modalities", "audio", "text")
    _check_messages(request)
    _check_choices(request)


def _check_messages(request: ChatCompletionRequest) -> None:
    for i, message in enumerate(request.messages):
        where = f"messages[{i}]"
        if message.content is None and not (message.role == "assistant"):
            raise InvalidRequest(f"{where} ({message.role}) has no content", param=f"{where}.content")
        if message.role == "assistant" and message.content is None and not message.tool_calls:
            raise InvalidRequest(
                f"{where} (assistant) has neither content nor tool_calls", param=f"{where}.content"
            )
        if message.tool_calls is not None and message.role != "assistant":
            raise InvalidRequest(
                f"{where}: only assistant messages carry tool_calls", param=f"{where}.tool_calls"
            )
        if message.role == "tool" and not message.tool_call_id:
            raise InvalidRequest(
                f"{where}: a tool message needs its tool_call_id", param=f"{where}.tool_call_id"
            )
        if message.tool_call_id is not None and message.role != "tool":
            raise InvalidRequest(
                f"{where}: only tool messages carry a tool_call_id", param=f"{where}.tool_call_id"
            )


def _check_choices(request: ChatCompletionRequest) -> None:
    if request.top_logprobs and not request.logprobs:
        raise InvalidRequest("top_logprobs needs logprobs set to true", param="top_logprobs")
    for token in request.logit_bias or ():
        if not token.isdigit() or len(token) > 9:
            raise InvalidRequest(
                f"logit_bias keys are token ids; {token[:20]!r} is not one", param="logit_bias"
            )
    names: set[str] = set()
    for i, tool in enumerate(request.tools or ()):
        if tool.function.name in names:
            raise InvalidRequest(
                f"tools[{i}]: the function name {tool.function.name!r} is used twice",
                param=f"tools[{i}].function.name",
            )
        names.add(tool.function.name)
        if tool.function.parameters is not None:
            schemas.check(tool.function.parameters, f"tools[{i}].function.parameters", object_only=True)
    choice = request.tool_choice
    if choice is not None and not request.tools:
        raise InvalidRequest("tool_choice is only allowed when tools are specified", param="tool_choice")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in names:
        raise InvalidRequest(
            f"tool_choice names the function {choice.function.name!r}, which is not among the tools",
            param="tool_choice",
        )
    if isinstance(request.response_format, JsonSchemaFormat):
        spec = request.response_format.json_schema
        if spec.schema is not None:
            schemas.check(spec.schema, "response_format.json_schema.schema")


_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    return _encoder.encode(value)
