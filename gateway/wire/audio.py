"""``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``: OpenAI's multipart request, read
strictly and within bounds, and its answers in each ``response_format``.

The form is parsed by python-multipart from a body already read under ``server.max_body_bytes``; the
parser is also held to a few parts of a few headers each, and a field other than ``file`` to 64 KiB,
so a hostile form costs no more than its bytes. A field OpenAI does not define is a 400 naming it (as
an unknown JSON field is); so is a malformed value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
from python_multipart import MultipartParser
from python_multipart.exceptions import MultipartParseError

from gateway.errors import InvalidRequest
from gateway.wire import fields
from tiers.speech import Transcript

Format = Literal["json", "text", "srt", "verbose_json", "vtt"]
FORMATS: tuple[str, ...] = ("json", "text", "srt", "verbose_json", "vtt")
MAX_FIELD_BYTES = 65_536  # one form field other than the file
MAX_PARTS = 32
_FIELDS = frozenset(
    {"model", "language", "prompt", "response_format", "temperature", "stream", "timestamp_granularities"}
)
_TRANSLATION_FIELDS = frozenset({"model", "prompt", "response_format", "temperature"})
_MEDIA = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """One transcription (``task`` "transcribe") or translation to English ("translate")."""

    audio: bytes
    filename: str
    model: str
    task: Literal["transcribe", "translate"] = "transcribe"
    language: str | None = None
    prompt: str | None = None
    response_format: Format = "json"
    temperature: float = 0.0
    granularities: frozenset[str] = field(default_factory=lambda: frozenset({"segment"}))
    stream: bool = False

    @property
    def words(self) -> bool:
        return self.response_format == "verbose_json" and "word" in self.granularities


@dataclass(slots=True)
class _Form:
    fields: dict[str, list[str]] = field(default_factory=dict)
    filename: str = ""
    file: bytearray | None = None


def _boundary(content_type: str) -> bytes:
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise InvalidRequest(
            "send the audio as multipart/form-data (a 'file' part and the fields), "
            f"not {kind.strip() or 'nothing'}"
        )
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1")
    raise InvalidRequest("the multipart/form-data Content-Type names no boundary")


def _disposition(value: bytes) -> tuple[str, str | None]:
    """(name, filename) of a part's Content-Disposition."""
    name, filename = "", None
    for item in value.decode("utf-8", "replace").split(";")[1:]:
        key, _, raw = item.strip().partition("=")
        text = raw.strip().strip('"')
        if key.lower() == "name":
            name = text
        elif key.lower() == "filename":
            filename = text
    return name, filename


def read_form(body: bytes, content_type: str, max_file_bytes: int) -> _Form:
    form = _Form()
    state: dict[str, Any] = {"parts": 0, "name": "", "filename": None, "buf": bytearray(), "header": b""}

    def on_header_field(data: bytes, start: int, end: int) -> None:
        state["header"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        if state["header"].lower() == b"content-disposition":
            state["name"], state["filename"] = _disposition(data[start:end])

    def on_header_end() -> None:
        state["header"] = b""

    def on_part_begin() -> None:
        state["parts"] += 1
        if state["parts"] > MAX_PARTS:
            raise InvalidRequest(f"the form has over {MAX_PARTS} parts")
        state["name"], state["filename"], state["buf"] = "", None, bytearray()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        buf: bytearray = state["buf"]
        buf += data[start:end]
        limit = max_file_bytes if state["name"] == "file" else MAX_FIELD_BYTES
        if len(buf) > limit:
            raise InvalidRequest(
                f"form field {state['name']!r} is over {limit} bytes", param=state["name"] or None
            )

    def on_part_end() -> None:
        name = state["name"]
        if name == "file":
            form.file, form.filename = state["buf"], state["filename"] or ""
        elif name:
            key = name.removesuffix("[]")
            form.fields.setdefault(key, []).append(bytes(state["buf"]).decode("utf-8", "replace"))

    parser = MultipartParser(
        _boundary(content_type),
        {
            "on_part_begin": on_part_begin,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
        },
        max_header_count=8,
        max_header_size=4224,
    )
    try:
        parser.write(body)
        parser.finalize()
    except MultipartParseError as exc:
        raise InvalidRequest(f"the multipart/form-data body is malformed: {exc}") from exc
    return form


def _one(form: _Form, name: str) -> str | None:
    values = form.fields.get(name)
    if not values:
        return None
    if len(values) > 1 and name != "timestamp_granularities":
        raise InvalidRequest(f"{name!r} is sent {len(values)} times; send it once", param=name)
    return values[0]


def parse_speech_request(
    body: bytes, content_type: str, task: Literal["transcribe", "translate"], max_file_bytes: int
) -> SpeechRequest:
    form = read_form(body, content_type, max_file_bytes)
    known = _FIELDS if task == "transcribe" else _TRANSLATION_FIELDS
    fields.refuse_named(form.fields, fields.TRANSCRIPTIONS if task == "transcribe" else fields.TRANSLATIONS)
    for name in form.fields:
        if name not in known:
            raise InvalidRequest(
                f"unknown field {name!r} (this endpoint takes: file, {', '.join(sorted(known))})", param=name
            )
    if not form.file:
        raise InvalidRequest(
            "'file' is missing or empty: send the audio as the form's 'file' part", param="file"
        )
    model = _one(form, "model")
    if not model:
        raise InvalidRequest("'model' is required", param="model")
    fmt = _one(form, "response_format") or "json"
    if fmt not in FORMATS:
        raise InvalidRequest(
            f"'response_format' must be one of {', '.join(FORMATS)}", param="response_format"
        )
    raw_t = _one(form, "temperature") or "0"
    try:
        temperature = float(raw_t)
    except ValueError:
        raise InvalidRequest("'temperature' must be a number", param="temperature") from None
    if not 0.0 <= temperature <= 1.0:
        raise InvalidRequest("'temperature' must be between 0 and 1", param="temperature")
    grains = frozenset(form.fields.get("timestamp_granularities") or ["segment"])
    if not grains <= {"segment", "word"}:
        raise InvalidRequest(
            "'timestamp_granularities' items must be 'segment' or 'word'", param="timestamp_granularities"
        )
    stream = (_one(form, "stream") or "false").lower()
    if stream not in ("true", "false"):
        raise InvalidRequest("'stream' must be true or false", param="stream")
    language = _one(form, "language")
    if language is not None and not (2 <= len(language) <= 3 and language.isalpha()):
        raise InvalidRequest("'language' must be an ISO-639-1 code such as 'en'", param="language")
    return SpeechRequest(
        audio=bytes(form.file),
        filename=form.filename,
        model=model[:256],
        task=task,
        language=language.lower() if language else None,
        prompt=_one(form, "prompt"),
        response_format=fmt,  # type: ignore[arg-type]
        temperature=temperature,
        granularities=grains,
        stream=stream == "true",
    )


def _clock(seconds: float, comma: bool) -> str:
    ms = round(seconds * 1000)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, ms = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{',' if comma else '.'}{ms:03d}"


def _cues(transcript: Transcript, srt: bool) -> str:
    lines = [] if srt else ["WEBVTT", ""]
    for n, s in enumerate(transcript.segments, 1):
        if srt:
            lines.append(str(n))
        lines += [f"{_clock(s.start, srt)} --> {_clock(s.end, srt)}", s.text.strip(), ""]
    return "\n".join(lines) + "\n"


def _verbose(transcript: Transcript, request: SpeechRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": request.task,
        "language": transcript.language,
        "duration": round(transcript.duration, 3),
        "text": transcript.text,
    }
    if "segment" in request.granularities or request.task == "translate":
        body["segments"] = [
            {
                "id": s.id,
                "seek": s.seek,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": list(s.tokens),
                "temperature": s.temperature,
                "avg_logprob": s.avg_logprob,
                "compression_ratio": s.compression_ratio,
                "no_speech_prob": s.no_speech_prob,
            }
            for s in transcript.segments
        ]
    if request.words:
        body["words"] = [
            {"word": w.word.strip(), "start": w.start, "end": w.end}
            for s in transcript.segments
            for w in s.words
        ]
    if request.task == "transcribe":
        body["usage"] = duration_usage(transcript.duration)
    return body


def duration_usage(seconds: float) -> dict[str, Any]:
    """OpenAI's usage of a transcription billed by time (TranscriptTextUsageDuration)."""
    return {"type": "duration", "seconds": max(1, round(seconds))}


def render(transcript: Transcript, request: SpeechRequest) -> tuple[bytes, str]:
    """The answer's body and media type, in the ``response_format`` asked."""
    fmt = request.response_format
    if fmt == "text":
        return (transcript.text + "\n").encode(), _MEDIA[fmt]
    if fmt in ("srt", "vtt"):
        return _cues(transcript, fmt == "srt").encode(), _MEDIA[fmt]
    if fmt == "verbose_json":
        return msgspec.json.encode(_verbose(transcript, request)), _MEDIA[fmt]
    body: dict[str, Any] = {"text": transcript.text}
    if request.task == "transcribe":
        body["usage"] = duration_usage(transcript.duration)
    return msgspec.json.encode(body), _MEDIA[fmt]


def delta_event(text: str) -> bytes:
    """One ``transcript.text.delta`` server-sent event."""
    return b"data: " + msgspec.json.encode({"type": "transcript.text.delta", "delta": text}) + b"\n\n"


def done_event(text: str, tokens: int) -> bytes:
    """The closing ``transcript.text.done`` event: the whole text, and (as OpenAI's schema has it for
    this event) its usage in tokens: the transcript's, as Whisper made them."""
    usage = {"type": "tokens", "input_tokens": 0, "output_tokens": tokens, "total_tokens": tokens}
    body = {"type": "transcript.text.done", "text": text, "usage": usage}
    return b"data: " + msgspec.json.encode(body) + b"\n\n"
