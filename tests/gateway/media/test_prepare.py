"""The pipeline: media parts become what the tiers take, summarised, cached by content; a bad part
is refused naming it; decoding runs in worker processes that a hung or crashed decoder cannot stall."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from gateway.errors import InvalidRequest, PayloadTooLarge, UnprocessableMedia, UnsupportedMediaType
from gateway.media import MediaPipeline, MediaSettings, MediaTargets, engine_messages
from gateway.media._failure import MediaFailure
from gateway.media._runner import DecodePool
from gateway.wire.chat import AudioPart, FramesPart, ImagePart, ImageURL, parse_chat_request
from tests import media_files


def _request(*content: dict[str, object], text: str = "What is this?") -> bytes:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
        {"role": "user", "content": [{"type": "text", "text": text}, *content]},
    ]
    return msgspec.json.encode({"model": "cloud", "messages": messages, "max_tokens": 8})


def _image(data: bytes, mime: str = "image/jpeg") -> dict[str, object]:
    return {"type": "image_url", "image_url": {"url": media_files.data_uri(mime, data)}}


@pytest.fixture
async def pipeline(tmp_path: Path) -> AsyncIterator[MediaPipeline]:
    settings = msgspec.convert({"workers": 1, "timeout_s": 10, "max_parts": 4}, MediaSettings)
    media = MediaPipeline(settings, tmp_path, MediaTargets(image_max_pixels=65_536, audio=True))
    yield media
    await media.aclose()


async def test_media_are_normalised_summarised_and_cached(pipeline: MediaPipeline) -> None:
    body = _request(
        _image(media_files.jpeg(1600, 1200)),
        _image(media_files.png(50, 40), "image/png"),
        {
            "type": "video_url",
            "video_url": {"url": media_files.data_uri("video/mp4", media_files.video(3.0))},
        },
        {
            "type": "input_audio",
            "input_audio": {"data": media_files.b64(media_files.audio(2.0)), "format": "mp3"},
        },
    )
    first = await pipeline.prepare(parse_chat_request(body))
    s = first.summary
    assert (s.images, s.videos, s.video_frames, s.audio_clips) == (2, 1, 3, 1)
    assert 50 * 40 < s.image_pixels <= 65_536 + 50 * 40
    assert s.video_seconds == pytest.approx(3.0, abs=0.1) and s.audio_seconds == pytest.approx(2.0, abs=0.1)
    parts = first.request.messages[2].content
    assert isinstance(parts, list)
    assert isinstance(parts[1], ImagePart) and parts[1].image_url.url.startswith("data:image/jpeg;base64,")
    assert isinstance(parts[2], ImagePart) and parts[2].image_url.url.startswith("data:image/png;base64,")
    assert isinstance(parts[3], FramesPart) and len(parts[3].frames) == 3
    assert isinstance(parts[4], AudioPart) and parts[4].input_audio.format == "wav"
    assert first.cache_misses == 4 and first.cache_hits == 0
    info = {m.param: m for m in first.media}
    photo = info["messages[2].content[1]"]
    assert photo.original == {"width": 1600, "height": 1200, "aspect_ratio": 1.3333, "format": "JPEG"}
    assert photo.sent["width"] * photo.sent["height"] <= 65_536
    assert info["messages[2].content[3]"].original["fps"] == pytest.approx(25)
    assert info["messages[2].content[4]"].original["channels"] == 2
    stages = {"fetch_s", "image_pool_s", "image_decode_s", "video_pool_s", "video_sample_s", "audio_decode_s"}
    assert stages <= set(first.timings)
    again = await pipeline.prepare(parse_chat_request(body))
    assert again.cache_hits == 4 and again.cache_misses == 0  # the same media are decoded once
    assert again.summary == first.summary


async def test_a_request_without_media_is_returned_as_it_is(pipeline: MediaPipeline) -> None:
    request = parse_chat_request(_request())
    assert (await pipeline.prepare(request)).request is request


def test_video_frames_reach_the_engine_as_image_parts() -> None:
    frame = ImageURL("data:image/jpeg;base64,AA==")
    part = FramesPart([frame, frame], [0.0, 1.0], 2.0, 25.0)
    messages = [{"role": "user", "content": [msgspec.to_builtins(part), {"type": "text", "text": "hi"}]}]
    out = engine_messages(messages)[0]["content"]
    assert [p["type"] for p in out] == ["text", "image_url", "image_url", "text"]
    assert "frames at 0.0s, 1.0s" in out[0]["text"]


@pytest.mark.parametrize(
    ("part", "error", "words"),
    [
        (_image(b""), UnprocessableMedia, "empty"),
        (_image(media_files.jpeg(640, 480)[:2000]), UnprocessableMedia, "cannot be decoded"),
        (_image(b"plain text, not a picture", "image/png"), UnsupportedMediaType, "supported format"),
        (_image(media_files.jpeg(64, 64), "text/plain"), UnsupportedMediaType, "text/plain"),
        (_image(media_files.png_header_only(20_000, 20_000), "image/png"), PayloadTooLarge, "pixels"),
        (
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@not base64"}},
            InvalidRequest,
            "base64",
        ),
        ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, InvalidRequest, "scheme"),
        ({"type": "image_url", "image_url": {"url": "https://127.0.0.1/x.png"}}, InvalidRequest, "loopback"),
        (
            {"type": "image_url", "image_url": {"url": "https://169.254.169.254/latest"}},
            InvalidRequest,
            "link-local",
        ),
        (
            {"type": "video_url", "video_url": {"url": media_files.data_uri("video/mp4", b"\x00" * 300)}},
            UnprocessableMedia,
            "not a readable",
        ),
        (
            {
                "type": "input_audio",
                "input_audio": {"data": media_files.b64(media_files.png()), "format": "wav"},
            },
            UnsupportedMediaType,
            "",
        ),
        (
            {
                "type": "input_audio",
                "input_audio": {"data": media_files.b64(media_files.audio(1.0)), "format": "midi"},
            },
            UnsupportedMediaType,
            "midi",
        ),
    ],
    ids=[
        "zero-length",
        "truncated",
        "not-an-image",
        "wrong-mime",
        "bomb",
        "bad-base64",
        "file-url",
        "loopback-url",
        "metadata-url",
        "bad-video",
        "audio-not-audio",
        "unknown-audio-format",
    ],
)
async def test_a_bad_part_is_refused_naming_it(
    pipeline: MediaPipeline, part: dict[str, object], error: type[Exception], words: str
) -> None:
    body = _request(_image(media_files.jpeg(32, 32)), part)
    with pytest.raises(error) as info:
        await pipeline.prepare(parse_chat_request(body))
    assert info.value.param == "messages[2].content[2]"  # type: ignore[attr-defined]
    assert info.value.message.startswith("messages[2].content[2] (")  # type: ignore[attr-defined]
    assert words in info.value.message  # type: ignore[attr-defined]


async def test_too_many_parts_and_oversized_parts_are_413(tmp_path: Path) -> None:
    settings = msgspec.convert({"workers": 1, "max_parts": 2, "max_part_bytes": 4096}, MediaSettings)
    media = MediaPipeline(settings, tmp_path, MediaTargets())
    try:
        small = _image(media_files.jpeg(16, 16))
        with pytest.raises(PayloadTooLarge) as info:
            await media.prepare(parse_chat_request(_request(small, small, small)))
        assert info.value.param == "messages[2].content[3]" and info.value.code == "too_many_media_parts"
        with pytest.raises(PayloadTooLarge) as info:
            await media.prepare(parse_chat_request(_request(_image(media_files.jpeg(1000, 1000)))))
        assert info.value.param == "messages[2].content[1]"
    finally:
        await media.aclose()


def _hang(_data: bytes, _params: object) -> None:
    while True:  # a decoder stuck in a loop
        pass


def _hang_hard(_data: bytes, _params: object) -> None:
    signal.signal(signal.SIGALRM, signal.SIG_IGN)  # ... that even ignores its timer
    while True:
        time.sleep(0.05)


def _crash(_data: bytes, _params: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # a decoder that takes its worker down


def _ok(data: bytes, _params: object) -> int:
    return len(data)


async def test_the_worker_pool_survives_hung_and_crashing_decoders() -> None:
    pool = DecodePool(1)
    try:
        assert await pool.run(_ok, 5.0, b"abc", None) == 3
        started = time.monotonic()
        with pytest.raises(MediaFailure, match="longer than"):
            await pool.run(_hang, 0.5, b"", None)
        with pytest.raises(MediaFailure, match="longer than"):
            await pool.run(_hang_hard, 0.5, b"", None)
        assert time.monotonic() - started < 15  # bounded by the timeouts, not by the decoders
        with pytest.raises(MediaFailure, match="crashed"):
            await pool.run(_crash, 5.0, b"", None)
        assert await pool.run(_ok, 5.0, b"abcd", None) == 4  # and it still decodes
        results = await asyncio.gather(*(pool.run(_ok, 5.0, b"x" * n, None) for n in range(4)))
        assert results == [0, 1, 2, 3]
    finally:
        pool.close()
