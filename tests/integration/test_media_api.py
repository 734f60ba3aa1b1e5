"""Images, video and audio through the gateway: refused media named in OpenAI's error shape,
the forms a tier receives, and the real cloud VLM (Idefics3 on vLLM) seeing them in its prompt."""

from __future__ import annotations

import base64
import io
import re
import wave
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from tests import media_files
from tests.conftest import Gateway, children, start_gateway
from tests.fakes import FakeVLLM
from tests.integration.test_speech_api import BUILT as SPEECH_BUILT

FRESH = {"Cache-Control": "no-cache"}


def _chat(gw: Gateway, *parts: dict[str, Any], model: str = "cloud", **extra: Any) -> httpx.Response:
    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Hello."},
            {"role": "user", "content": [{"type": "text", "text": "Describe this."}, *parts]},
        ],
        "max_tokens": 8,
        "temperature": 0,
        **extra,
    }
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={**gw.auth, **FRESH}, timeout=300)


def image(data: bytes, mime: str = "image/jpeg") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": media_files.data_uri(mime, data)}}


def video(data: bytes) -> dict[str, Any]:
    return {"type": "video_url", "video_url": {"url": media_files.data_uri("video/mp4", data)}}


def audio(data: bytes, fmt: str) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


BAD_PARTS = [
    (image(b""), 422, "empty"),
    (image(media_files.jpeg(800, 600)[:4000]), 422, "cannot be decoded"),
    (image(b"GIF89a but not really"), 415, "supported format"),
    (image(media_files.jpeg(32, 32), "application/pdf"), 415, "application/pdf"),
    (image(media_files.png_header_only(20_000, 20_000), "image/png"), 413, "pixels"),
    ({"type": "image_url", "image_url": {"url": "http://169.254.169.254/latest/meta-data/"}}, 400, "scheme"),
    ({"type": "image_url", "image_url": {"url": "https://[::1]:8080/a.png"}}, 400, "loopback"),
    ({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}, 400, "scheme"),
    (video(media_files.video(2.0)[:5000]), 422, "truncated"),
    (audio(media_files.audio(1.0, fmt="flac"), "mp3"), 415, "declared as mp3"),
    (audio(b"not audio", "wav"), 422, "not a readable"),
    (audio(media_files.png(8, 8), "wav"), 415, "declared as wav but the data is png"),
]


@pytest.mark.parametrize(("part", "status", "words"), BAD_PARTS)
def test_bad_media_get_a_4xx_naming_the_part(
    gateway: Gateway, part: dict[str, Any], status: int, words: str
) -> None:
    reply = _chat(gateway, image(media_files.jpeg(16, 16)), part)
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert error["param"] == "messages[2].content[2]"
    assert error["message"].startswith("messages[2].content[2] (") and words in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    # The worker survived: the gateway still answers.
    assert httpx.get(f"{gateway.url}/healthz", timeout=5).status_code == 200


def test_too_many_media_parts_is_413(gateway: Gateway) -> None:
    small = image(media_files.jpeg(8, 8))
    reply = _chat(gateway, *[small] * 17)
    assert reply.status_code == 413 and reply.json()["error"]["code"] == "too_many_media_parts"
    assert reply.json()["error"]["param"] == "messages[2].content[17]"


def test_audio_no_tier_takes_is_heard_as_its_transcript(gateway: Gateway) -> None:
    # The embedded tiers take no audio (SmolLM2 on llama.cpp, the Idefics3 VLM): the speech model's
    # transcript stands in for it (a tone: an empty one), and the answer says so; without the speech
    # model it is refused, said plainly (tests/integration/test_speech_api.py has real speech).
    reply = _chat(gateway, audio(media_files.audio(1.0, fmt="wav"), "wav"), model="tiergate-auto")
    if SPEECH_BUILT:
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-tiergate-degraded"] == "audio_transcript"
        return
    assert reply.status_code == 400, reply.text
    assert (
        reply.json()["error"]["code"] == "request_does_not_fit"
        and "audio" in reply.json()["error"]["message"]
    )


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM("ok") as server:
        yield server


@pytest.fixture
def av_gateway(tmp_path: Path, fake: FakeVLLM) -> Iterator[Gateway]:
    """A gateway whose cloud says it takes images, video and audio (a fake vLLM that records)."""
    config = (
        f'[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\n'
        'modalities = ["text", "image", "video", "audio"]\n'
        "[cloud.limits]\nmax_images = 8\nmax_image_pixels = 40000\nmax_video_seconds = 10\nmax_audio_seconds = 30\n"
        "[media.video]\nmax_frames = 4\n"
    )
    gw = start_gateway(tmp_path, config)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    yield gw
    gw.stop()


@pytest.fixture
def deaf_gateway(tmp_path: Path, fake: FakeVLLM) -> Iterator[Gateway]:
    """A gateway whose cloud takes video but no audio, whose speech model hears videos' tracks."""
    config = (
        f'[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\nmodalities = ["text", "image", "video"]\n'
        "[cloud.limits]\nmax_video_seconds = 10\n[media.video]\nmax_frames = 4\n[speech]\nvideo_audio = true\n"
    )
    gw = start_gateway(tmp_path, config)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    yield gw
    gw.stop()


@pytest.mark.skipif(not SPEECH_BUILT, reason="the speech model is not built (scripts/setup.sh)")
def test_a_videos_spoken_track_is_heard_as_its_transcript_beside_its_frames(
    deaf_gateway: Gateway, fake: FakeVLLM
) -> None:
    """[speech] video_audio: the cloud sees the video's frames and, as text, what is said in it."""
    from tests import speech_files

    clip = speech_files.talking_video(speech_files.spoken("What is the capital of France?"))
    reply = _chat(deaf_gateway, video(clip), model="tiergate-auto")
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-tiergate-tier"] == "cloud"
    assert reply.headers["x-tiergate-degraded"] == "audio_transcript"
    parts = fake.requests[-1]["messages"][-1]["content"]
    kinds = [p["type"] for p in parts]
    assert "input_audio" not in kinds and kinds.count("image_url") >= 1, kinds
    said = parts[-1]["text"]
    assert said.startswith("[transcript of the video's audio]: ") and "capital" in said.lower()


def _wav(b64: str) -> tuple[int, int, float]:
    with wave.open(io.BytesIO(base64.b64decode(b64))) as w:
        return w.getnchannels(), w.getframerate(), w.getnframes() / w.getframerate()


def test_the_tier_receives_normalised_media_in_the_engines_form(av_gateway: Gateway, fake: FakeVLLM) -> None:
    reply = _chat(
        av_gateway,
        image(media_files.jpeg(1200, 900)),
        video(media_files.video(6.0, audio=True)),
        audio(media_files.audio(2.0, fmt="mp3"), "mp3"),
        model="tiergate-auto",
    )
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-tiergate-tier"] == "cloud"
    parts = fake.requests[-1]["messages"][2]["content"]
    kinds = [p["type"] for p in parts]
    # text, the image, the video as a caption + 4 frames + its audio track, the audio clip
    assert kinds == ["text", "image_url", "text", *["image_url"] * 4, "input_audio", "input_audio"], kinds
    first = parts[1]["image_url"]["url"]
    assert first.startswith("data:image/jpeg;base64,")
    from PIL import Image

    shrunk = Image.open(io.BytesIO(base64.b64decode(first.split(",", 1)[1])))
    assert shrunk.width * shrunk.height <= 40_000 and abs(shrunk.width / shrunk.height - 4 / 3) < 0.02
    assert "frames at 0.0s" in parts[2]["text"]
    for clip, seconds in ((parts[7], 6.0), (parts[8], 2.0)):
        assert clip["input_audio"]["format"] == "wav"
        channels, rate, length = _wav(clip["input_audio"]["data"])
        assert (channels, rate) == (1, 16_000) and length == pytest.approx(seconds, abs=0.3)


def _decode_workers(gw: Gateway) -> list[int]:
    """The media decode workers: the gateway's children that loaded FFmpeg (the router's refit worker
    and the ledger writer are spawned the same way)."""
    found = [p for p in children(gw.process.pid) if "libavcodec" in _maps(p)]
    assert found, "the gateway should have started its media decode workers"
    return found


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def _memory(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
def test_a_large_png_is_served_and_its_decode_worker_grows_little(
    av_gateway: Gateway, fake: FakeVLLM
) -> None:
    """The 6300 x 6300 RGBA PNG (166 KiB) that cost a decode worker +492 MiB."""
    from gateway.media import image as images

    data = media_files.png_marked(6300, 6300, "RGBA")
    # Each worker's first medium imports the decoders' modules (tens of MiB): warm both, a few at once.
    warm = [image(media_files.png_marked(700 + i, 500, "RGB"), "image/png") for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        assert all(r.status_code == 200 for r in pool.map(lambda part: _chat(av_gateway, part), warm))
    workers = _decode_workers(av_gateway)
    before = {}
    for pid in workers:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak starts again from now
        before[pid] = _memory(pid, "VmRSS")
    reply = _chat(av_gateway, image(data, "image/png"))
    assert reply.status_code == 200, reply.text
    growth = max(_memory(pid, "VmHWM") - before[pid] for pid in workers)
    sent = fake.requests[-1]["messages"][2]["content"][1]["image_url"]["url"]
    shrunk = Image.open(io.BytesIO(base64.b64decode(sent.split(",", 1)[1])))
    assert shrunk.size == (200, 200) and shrunk.getpixel((0, 0)) == (255, 0, 0)  # max_image_pixels 40,000
    # The bytes arrive pickled (the file twice over: the pipe's, then the unpickled copy).
    counted = images.peak_bytes(6300, 6300, "PNG", 40_000) + 2 * len(data)
    print(f"\na decode worker's peak RSS grew {growth / 2**20:.2f} MiB (counted {counted / 2**20:.2f} MiB)")
    assert growth <= counted


def test_media_over_every_tiers_limits_does_not_fit(av_gateway: Gateway) -> None:
    reply = _chat(av_gateway, video(media_files.video(12.0, size=(64, 48))), model="tiergate-auto")
    assert reply.status_code == 400 and "10 s of video" in reply.json()["error"]["message"]


def _metric(gw: Gateway, name: str) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=5).text
    found = re.search(rf"^{re.escape(name)} ([0-9.e+]+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


# -- the real cloud VLM ---------------------------------------------------------------------------


@pytest.mark.cloud
def test_the_cloud_vlm_sees_images_and_video_frames_in_its_prompt(cloud_gateway: Gateway) -> None:
    gw = cloud_gateway
    tokens = {}
    for name, parts in {
        "text": [],
        "one image": [image(media_files.jpeg(640, 480))],
        "two images": [
            image(media_files.jpeg(640, 480)),
            image(media_files.png(300, 200, "RGB"), "image/png"),
        ],
        "video": [video(media_files.video(3.0, size=(160, 120)))],
    }.items():
        reply = _chat(gw, *parts)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-tiergate-tier"] == "cloud"
        tokens[name] = reply.json()["usage"]["prompt_tokens"]
    assert tokens["text"] < tokens["one image"] < tokens["two images"], tokens
    assert tokens["video"] > tokens["one image"], tokens  # three frames, each an image to the VLM


@pytest.mark.cloud
def test_the_same_image_sent_twice_is_decoded_once(cloud_gateway: Gateway) -> None:
    gw = cloud_gateway
    photo = image(media_files.jpeg(2000, 1500, quality=80))
    hits = _metric(gw, 'tiergate_media_cache_requests_total{result="hit"}')
    misses = _metric(gw, 'tiergate_media_cache_requests_total{result="miss"}')
    first, second = _chat(gw, photo), _chat(gw, photo)
    assert first.status_code == second.status_code == 200
    assert _metric(gw, 'tiergate_media_cache_requests_total{result="miss"}') == misses + 1
    assert _metric(gw, 'tiergate_media_cache_requests_total{result="hit"}') == hits + 1
    assert first.json()["usage"]["prompt_tokens"] == second.json()["usage"]["prompt_tokens"]
