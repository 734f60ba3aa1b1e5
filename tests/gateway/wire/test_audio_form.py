"""The audio endpoints' multipart form, read strictly and within bounds, and their answer formats."""

from __future__ import annotations

import json

import pytest

from gateway.errors import InvalidRequest
from gateway.wire.audio import MAX_PARTS, parse_speech_request, render
from tiers.speech import Segment, Transcript, Word

BOUNDARY = "xYzZY"
CT = f"multipart/form-data; boundary={BOUNDARY}"


def form(*fields: tuple[str, str], file: bytes | None = b"RIFF....WAVE") -> bytes:
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{n}"\r\n\r\n{v}\r\n'.encode()
        for n, v in fields
    ]
    if file is not None:
        head = f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n'
        parts.append(head.encode() + b"Content-Type: audio/wav\r\n\r\n" + file + b"\r\n")
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def refused(body: bytes, content_type: str = CT, task: str = "transcribe") -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse_speech_request(body, content_type, task, 1000)  # type: ignore[arg-type]
    return caught.value


def test_every_field_is_read() -> None:
    body = form(
        ("model", "whisper-1"),
        ("language", "EN"),
        ("prompt", "tiergate"),
        ("temperature", "0.2"),
        ("response_format", "verbose_json"),
        ("timestamp_granularities[]", "word"),
        ("timestamp_granularities[]", "segment"),
        ("stream", "true"),
    )
    got = parse_speech_request(body, CT, "transcribe", 1000)
    assert got.audio == b"RIFF....WAVE" and got.filename == "a.wav" and got.model == "whisper-1"
    assert got.language == "en" and got.prompt == "tiergate" and got.temperature == 0.2
    assert got.granularities == {"word", "segment"} and got.words and got.stream


def test_bad_forms_are_400s_naming_the_field() -> None:
    assert refused(form(("model", "m"), ("colour", "blue"))).param == "colour"
    assert refused(form(("model", "m"), ("language", "en")), task="translate").param == "language"
    assert refused(form(("model", "m"), ("response_format", "xml"))).param == "response_format"
    assert refused(form(("model", "m"), ("temperature", "2"))).param == "temperature"
    assert refused(form(("model", "m"), ("stream", "yes"))).param == "stream"
    assert refused(form(("model", "m"), ("model", "n"))).param == "model"
    assert refused(form(("model", "m"), file=None)).param == "file"
    assert refused(form(file=b"x")).param == "model"
    assert "multipart/form-data" in refused(b"{}", "application/json").message
    assert "boundary" in refused(form(("model", "m")), "multipart/form-data").message


def test_sizes_and_counts_are_bounded() -> None:
    assert refused(form(("model", "m"), file=b"x" * 1001)).param == "file"  # the file limit
    assert refused(form(("model", "m"), ("prompt", "p" * 70_000))).param == "prompt"
    assert "parts" in refused(form(*[("prompt", "p")] * (MAX_PARTS + 1))).message
    many_headers = f"--{BOUNDARY}\r\n" + "X-A: b\r\n" * 20 + "\r\nv\r\n--" + BOUNDARY + "--\r\n"
    assert "malformed" in refused(many_headers.encode()).message


TRANSCRIPT = Transcript(
    "Hello there. General Kenobi.",
    "en",
    3725.5,
    (
        Segment(0, 0, 0.0, 1.5, " Hello there.", (1, 2), 0.0, -0.2, 1.1, 0.01, (Word(" Hello", 0.0, 0.6),)),
        Segment(1, 0, 3724.0, 3725.25, " General Kenobi.", (3,), 0.0, -0.3, 1.0, 0.02),
    ),
)


def asked(fmt: str, *grains: str, task: str = "transcribe") -> object:
    body = form(("model", "m"), ("response_format", fmt), *[("timestamp_granularities[]", g) for g in grains])
    return parse_speech_request(body, CT, task, 1000)  # type: ignore[arg-type]


def test_each_format() -> None:
    body, media = render(TRANSCRIPT, asked("json"))  # type: ignore[arg-type]
    assert media == "application/json"
    assert json.loads(body) == {"text": TRANSCRIPT.text, "usage": {"type": "duration", "seconds": 3726}}
    assert render(TRANSCRIPT, asked("text"))[0] == b"Hello there. General Kenobi.\n"  # type: ignore[arg-type]
    srt = render(TRANSCRIPT, asked("srt"))[0].decode()  # type: ignore[arg-type]
    assert (
        srt
        == "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n2\n01:02:04,000 --> 01:02:05,250\nGeneral Kenobi.\n\n"
    )
    vtt = render(TRANSCRIPT, asked("vtt"))[0].decode()  # type: ignore[arg-type]
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello there.\n")
    verbose = json.loads(render(TRANSCRIPT, asked("verbose_json", "word"))[0])  # type: ignore[arg-type]
    assert verbose["words"] == [{"word": "Hello", "start": 0.0, "end": 0.6}] and "segments" not in verbose
    both = json.loads(render(TRANSCRIPT, asked("verbose_json", "word", "segment"))[0])  # type: ignore[arg-type]
    assert [s["id"] for s in both["segments"]] == [0, 1] and both["language"] == "en"
    translated = json.loads(render(TRANSCRIPT, asked("json", task="translate"))[0])  # type: ignore[arg-type]
    assert translated == {"text": TRANSCRIPT.text}
