"""The OpenAI chat wire protocol as typed msgspec models, in one place.

Requests are decoded and validated here; anything that does not fit becomes a
:class:`~gateway.errors.InvalidRequest` naming the offending field.  Responses
are encoded from plain structs with pre-built encoders.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from gateway.errors import InvalidRequest

Role = Literal["system", "developer", "user", "assistant", "tool"]


class TextPart(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=False):
    text: str


class ImageURL(msgspec.Struct):
    url: str
    detail: Literal["auto", "low", "high"] = "auto"


class ImagePart(msgspec.Struct, tag_field="type", tag="image_url"):
    image_url: ImageURL


class InputAudio(msgspec.Struct):
    data: str
    format: str


class AudioPart(msgspec.Struct, tag_field="type", tag="input_audio"):
    input_audio: InputAudio


class VideoURL(msgspec.Struct):
    url: str


class VideoPart(msgspec.Struct, tag_field="type", tag="video_url"):
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


class Message(msgspec.Struct, omit_defaults=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None


class StreamOptions(msgspec.Struct):
    include_usage: bool = False


Probability = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    model: str
    messages: Annotated[list[Message], msgspec.Meta(min_length=1)]
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Probability | None = None
    n: Annotated[int, msgspec.Meta(ge=1)] = 1
    stop: str | Annotated[list[str], msgspec.Meta(max_length=4)] | None = None
    seed: Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] | None = None  # OpenAI's: int64
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    user: str | None = None

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


_request_decoder = msgspec.json.Decoder(ChatCompletionRequest)


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    """Decode and validate a chat completion request body."""
    if not body:
        raise InvalidRequest("the request body is empty; send a JSON chat completion request")
    try:
        request = _request_decoder.decode(body)
    except msgspec.ValidationError as exc:
        text, _, path = str(exc).partition(" - at `$.")
        param = path.rstrip("`") or None
        if text.startswith("Object missing required field"):
            field = text.rsplit("`", 2)[-2] if "`" in text else None
            param = f"{param}.{field}" if param and field else field
        raise InvalidRequest(f"invalid request: {exc}", param=param) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid UTF-8 (byte {exc.start})") from exc
    except RecursionError as exc:  # msgspec stops at the interpreter's recursion limit
        raise InvalidRequest("the request body's JSON is nested too deeply") from exc
    if request.n != 1:
        raise InvalidRequest("only n=1 is supported", param="n")
    for i, message in enumerate(request.messages):
        if message.content is None and message.role != "assistant":
            raise InvalidRequest(
                f"messages[{i}] ({message.role}) has no content", param=f"messages[{i}].content"
            )
    return request


# -- responses -----------------------------------------------------------------


class ResponseMessage(msgspec.Struct):
    content: str
    role: str = "assistant"


class Choice(msgspec.Struct):
    index: int
    message: ResponseMessage
    finish_reason: str
    logprobs: None = None


class UsageBody(msgspec.Struct):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


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
    tiergate: TiergateInfo | msgspec.UnsetType = msgspec.UNSET


class DeltaBody(msgspec.Struct, omit_defaults=True):
    role: str | None = None
    content: str | None = None


class ChunkChoice(msgspec.Struct):
    index: int
    delta: DeltaBody
    finish_reason: str | None = None
    logprobs: None = None


class ChatCompletionChunk(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[ChunkChoice]
    object: str = "chat.completion.chunk"
    usage: UsageBody | None = None
    tiergate: TiergateInfo | msgspec.UnsetType = msgspec.UNSET


class ModelCard(msgspec.Struct):
    id: str
    created: int
    owned_by: str = "tiergate"
    object: str = "model"


class ModelList(msgspec.Struct):
    data: list[ModelCard]
    object: str = "list"


_encoder = msgspec.json.Encoder()


def encode(value: Any) -> bytes:
    return _encoder.encode(value)
