"""Speech to text through a real ``tiergate serve`` on the real Whisper base (CTranslate2, int8): the
official ``openai`` SDK's ``audio.transcriptions.create`` on espeak-ng speech (WAV, MP3, OGG) with its
word error measured, every ``response_format``, translations, streaming; a chat request whose audio no
tier takes, answered from its transcript; hostile audio, keys and the tenant's audio-seconds limit.

One gateway for the module (the edge tier for chat, no cloud), the model loaded once at its start. The
model is built by ``scripts/setup.sh``; without it, or without espeak-ng, these tests are skipped.
"""

from __future__ import annotations

import base64
import io
import statistics
import struct
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.settings import load_settings
from tests import speech_files
from tests.conftest import Gateway, start_gateway
from tests.integration.test_tenants_api import admin, error_of, fresh_minute, ledger_rows
from tests.openai_schema import validate
from tiers.speech import DEFAULT_SPEECH_MODEL_DIR

BUILT = (Path(load_settings().build_cache_dir).expanduser() / DEFAULT_SPEECH_MODEL_DIR / "model.bin").exists()
pytestmark = [
    pytest.mark.skipif(not BUILT, reason="the speech model is not built (scripts/setup.sh)"),
    pytest.mark.skipif(speech_files.ESPEAK is None, reason="espeak-ng is not installed (scripts/setup.sh)"),
]
FORMATS = ("wav", "mp3", "ogg")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = "[cloud]\nenabled = false\n[embedding]\nenabled = false\n[speech]\npreload = true\n"
    gateway = start_gateway(tmp_path_factory.mktemp("speech"), config)
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def hello() -> bytes:
    return speech_files.spoken("Please open the window.")


def post(
    gw: Gateway, audio: bytes, key: str | None = None, path: str = "transcriptions", **form: Any
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or gw.api_key}"} if key != "" else {}
    data = {"model": "whisper-1", **form}
    files = {"file": ("speech.wav", audio, "audio/wav")}
    return httpx.post(f"{gw.url}/v1/audio/{path}", data=data, files=files, headers=headers, timeout=120)


def test_the_openai_sdk_transcribes_spoken_sentences_with_few_word_errors(gw: Gateway) -> None:
    client = gw.client()
    errors = []
    for i, sentence in enumerate(speech_files.SENTENCES):
        fmt = FORMATS[i % len(FORMATS)]
        audio = speech_files.encoded(speech_files.spoken(sentence), fmt)
        got = client.audio.transcriptions.create(model="whisper-1", file=(f"s.{fmt}", audio), language="en")
        errors.append(speech_files.word_error(sentence, got.text))
    mean = statistics.mean(errors)
    print(f"word error over {len(errors)} sentences: mean {mean:.3f}, each {[round(e, 2) for e in errors]}")
    assert len(errors) >= 20 and mean <= 0.15


def test_every_response_format(gw: Gateway, hello: bytes) -> None:
    client = gw.client()
    as_json = client.audio.transcriptions.create(model="whisper-1", file=("a.wav", hello))
    assert speech_files.word_error("Please open the window.", as_json.text) <= 0.25
    raw = post(gw, hello)
    assert raw.headers["content-type"] == "application/json" and raw.headers["x-tiergate-tier"] == "speech"
    validate("CreateTranscriptionResponseJson", raw.json())
    text = post(gw, hello, response_format="text")
    assert text.headers["content-type"].startswith("text/plain") and text.text.strip() == as_json.text
    srt = post(gw, hello, response_format="srt").text
    assert srt.startswith("1\n00:00:00,000 --> 00:00:0") and as_json.text in srt
    vtt = post(gw, hello, response_format="vtt").text
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> ") and as_json.text in vtt
    verbose = client.audio.transcriptions.create(
        model="whisper-1",
        file=("a.wav", hello),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
    )
    body = verbose.model_dump(exclude_none=True)
    validate("CreateTranscriptionResponseVerboseJson", body)
    assert verbose.language == "en" and 1.0 < verbose.duration < 4.0
    assert verbose.segments and verbose.words and len(verbose.words) >= 3
    assert all(w.start <= w.end <= verbose.duration + 0.5 for w in verbose.words)
    assert [s.id for s in verbose.segments] == list(range(len(verbose.segments)))


def test_translations_answer_in_english(gw: Gateway, hello: bytes) -> None:
    got = gw.client().audio.translations.create(
        model="whisper-1", file=("a.mp3", speech_files.encoded(hello, "mp3"))
    )
    assert speech_files.word_error("Please open the window.", got.text) <= 0.25
    validate("CreateTranslationResponseJson", post(gw, hello, path="translations").json())
    refused = post(gw, hello, path="translations", language="en")  # not a translation's field
    assert refused.status_code == 400 and error_of(refused)["param"] == "language"


def test_a_stream_sends_text_deltas_then_the_whole_text(gw: Gateway, hello: bytes) -> None:
    events = list(
        gw.client().audio.transcriptions.create(model="whisper-1", file=("a.wav", hello), stream=True)
    )
    kinds = [e.type for e in events]
    assert kinds[-1] == "transcript.text.done" and kinds[:-1] and set(kinds[:-1]) == {"transcript.text.delta"}
    deltas = "".join(e.delta for e in events[:-1])  # type: ignore[union-attr]
    assert deltas.strip() == events[-1].text.strip()  # type: ignore[union-attr]
    assert speech_files.word_error("Please open the window.", events[-1].text) <= 0.25  # type: ignore[union-attr]


def _chat_with_audio(gw: Gateway, audio: bytes | None, key: str | None = None) -> httpx.Response:
    content: list[dict[str, Any]] = [{"type": "text", "text": "Answer the question."}]
    if audio is not None:
        data = base64.b64encode(audio).decode()
        content.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
    body = {"model": "tiergate-auto", "messages": [{"role": "user", "content": content}], "max_tokens": 8}
    headers = {"Authorization": f"Bearer {key or gw.api_key}", "Cache-Control": "no-cache"}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=120)


def test_chat_audio_no_tier_takes_is_answered_from_its_transcript(gw: Gateway) -> None:
    question = speech_files.spoken("What is the capital of France?")
    reply = _chat_with_audio(gw, question)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-tiergate-degraded"] == "audio_transcript"
    assert "audio transcribed to text" in reply.headers["x-tiergate-route-reason"]
    assert reply.json()["tiergate"]["degraded"] == ["audio_transcript"]
    without = _chat_with_audio(gw, None)
    assert without.status_code == 200
    # the transcript, marked as one, is in the prompt: ~10 tokens of "[transcript of audio]: What is ..."
    assert reply.json()["usage"]["prompt_tokens"] >= without.json()["usage"]["prompt_tokens"] + 8


def test_a_policy_that_would_rather_fail_is_refused_as_before(gw: Gateway) -> None:
    admin(gw, "POST", "/tenants", json={"name": "strict"})
    key = admin(gw, "POST", "/tenants/strict/keys").json()["key"]
    put = admin(gw, "PUT", "/tenants/strict/policy", json={"degrade": "fail"})
    assert put.status_code == 200, put.text
    reply = _chat_with_audio(gw, speech_files.spoken("Hello there."), key=key)
    assert reply.status_code == 400 and "audio" in error_of(reply)["message"]


def _wav_header(rate: int, frames: int) -> bytes:
    """A PCM WAV header claiming ``frames`` mono 16-bit samples at ``rate`` Hz."""
    size = frames * 2
    return (
        b"RIFF"
        + struct.pack("<I", 36 + size)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * 2, 2, 16)
        + b"data"
        + struct.pack("<I", size)
    )


def _rss_kib(gw: Gateway) -> int:
    status = Path(f"/proc/{gw.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_hostile_audio_is_a_shaped_4xx_and_memory_stays_bounded(gw: Gateway, hello: bytes) -> None:
    before = _rss_kib(gw)
    hours = _wav_header(16000, 16000 * 3600 * 5) + b"\x00\x01" * 8000  # claims 5 hours, holds 0.5 s
    cases = {
        "corrupt": b"\x00garbage, not audio\xff" * 200,
        "hours claimed": hours,
        "0 Hz": _wav_header(0, 16000) + b"\x00\x01" * 16000,
        "truncated mp3": speech_files.encoded(hello, "mp3")[:300],
        "empty": b"",
    }
    for name, data in cases.items():
        reply = post(gw, data)
        assert 400 <= reply.status_code < 500, (name, reply.status_code, reply.text)
        error = error_of(reply)
        assert error["param"] == "file", (name, error)
    long = io.BytesIO()  # 11 minutes of silence: over speech.max_seconds (600)
    with wave.open(long, "wb") as w:
        w.setnchannels(1), w.setsampwidth(1), w.setframerate(8000)
        w.writeframes(b"\x80" * 8000 * 660)
    too_long = post(gw, long.getvalue())
    assert too_long.status_code == 413 and error_of(too_long)["param"] == "file"
    assert _rss_kib(gw) - before < 64 * 1024


def test_bad_requests_name_their_field(gw: Gateway, hello: bytes) -> None:
    assert error_of(post(gw, hello, model="nope"))["param"] == "model"
    assert post(gw, hello, model="nope").status_code == 404
    for form, param in (
        ({"response_format": "xml"}, "response_format"),
        ({"temperature": "hot"}, "temperature"),
        ({"timestamp_granularities[]": "char"}, "timestamp_granularities"),
        ({"colour": "blue"}, "colour"),
    ):
        reply = post(gw, hello, **form)
        assert reply.status_code == 400 and error_of(reply)["param"] == param, (form, reply.text)
    no_file = httpx.post(
        f"{gw.url}/v1/audio/transcriptions",
        files={"model": (None, b"whisper-1")},  # a form without its file
        headers=gw.auth,
    )
    assert no_file.status_code == 400 and error_of(no_file)["param"] == "file"
    as_json = httpx.post(f"{gw.url}/v1/audio/transcriptions", json={"model": "whisper-1"}, headers=gw.auth)
    assert as_json.status_code == 400 and "multipart/form-data" in error_of(as_json)["message"]


def test_no_key_is_401(gw: Gateway, hello: bytes) -> None:
    reply = post(gw, hello, key="")
    assert reply.status_code == 401
    with pytest.raises(openai.AuthenticationError):
        gw.client(api_key="tg_nope_nope").audio.transcriptions.create(
            model="whisper-1", file=("a.wav", hello)
        )


def test_the_tenants_audio_seconds_limit_is_a_429_and_each_answer_its_ledger_row(
    gw: Gateway, hello: bytes
) -> None:
    admin(gw, "POST", "/tenants", json={"name": "talker", "limits": {"audio_seconds_per_min": 3}})
    key = admin(gw, "POST", "/tenants/talker/keys").json()["key"]
    fresh_minute()
    first = post(gw, hello, key=key)  # about 1.5 s of speech: 2 s charged
    assert first.status_code == 200, first.text
    refused = post(gw, hello, key=key)
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
    assert error_of(refused)["type"] == "rate_limit_exceeded"
    rid = first.headers["x-request-id"]
    row = ledger_rows(gw, want={rid})[rid]
    assert row.endpoint == "transcriptions" and row.tier == "speech" and row.status == 200
    assert row.cost_nusd == 2 * 100_000  # 2 s at $0.0001 a second


def test_models_and_the_openapi_document_list_the_speech_model(gw: Gateway) -> None:
    cards = {m["id"]: m for m in httpx.get(f"{gw.url}/v1/models", headers=gw.auth).json()["data"]}
    assert cards["whisper-1"]["endpoints"] == ["/v1/audio/transcriptions", "/v1/audio/translations"]
    assert "whisper-base" in cards
    paths = httpx.get(f"{gw.url}/schema/openapi.json").json()["paths"]
    form = paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]["multipart/form-data"]
    assert form["schema"]["properties"]["model"]["enum"] == ["whisper-1", "whisper-base"]


def test_the_tenants_residency_rules_read_the_transcript(gw: Gateway, hello: bytes) -> None:
    admin(gw, "POST", "/tenants", json={"name": "careful"})
    key = admin(gw, "POST", "/tenants/careful/keys").json()["key"]
    rule = {"detector": "pattern", "pattern": "(?i)window", "action": "refuse", "name": "no-windows"}
    assert admin(gw, "PUT", "/tenants/careful/policy", json={"residency": [rule]}).status_code == 200
    refused = post(gw, hello, key=key)  # "Please open the window."
    assert refused.status_code == 400, refused.text
    error = error_of(refused)
    assert (
        error["code"] == "residency_refused" and error["param"] == "file" and "no-windows" in error["message"]
    )
    streamed = post(gw, hello, key=key, stream="true")  # a stream is checked before it is sent
    assert streamed.status_code == 400 and error_of(streamed)["code"] == "residency_refused"
    other = post(gw, speech_files.spoken("The cat is sleeping on the sofa."), key=key)
    assert other.status_code == 200, other.text
