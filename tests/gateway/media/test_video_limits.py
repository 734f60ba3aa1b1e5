"""Video refused before it costs: frames over the pixel limit (a small file with huge frames),
containers and codecs off the allow-list, pixels decoded past the request's budget; each a
MediaFailure of a 4xx kind that says why, and a worker's memory stays bounded. The clips are made
here with PyAV."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import av
import msgspec
import pytest

from gateway.errors import PayloadTooLarge
from gateway.media import MediaPipeline, MediaSettings, MediaTargets, video
from gateway.media._config import DEFAULT_VIDEO_CODECS, DEFAULT_VIDEO_CONTAINERS
from gateway.media._failure import TOO_LARGE, UNSUPPORTED, MediaFailure
from gateway.wire.chat import parse_chat_request
from tests import media_files

PARAMS = video.VideoParams(
    1.0,
    8,
    600,
    65_536,
    containers=DEFAULT_VIDEO_CONTAINERS,
    codecs=DEFAULT_VIDEO_CODECS,
)


def flat_clip(
    width: int,
    height: int,
    frames: int = 2,
    *,
    codec: str = "libx264",
    container: str = "mp4",
    options: dict[str, str] | None = None,
) -> bytes:
    """A clip of flat frames: a few hundred KB at most, whatever the frame size."""
    if codec == "libx264" and options is None:
        options = {"preset": "ultrafast", "tune": "zerolatency"}
    out = io.BytesIO()
    with av.open(out, "w", format=container) as c:
        stream = c.add_stream(codec, rate=1, options=options or {})
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        frame = av.VideoFrame(width, height, "yuv420p")
        for plane in frame.planes:
            plane.update(bytes(plane.buffer_size))
        for i in range(frames):
            frame.pts = i
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    return out.getvalue()


def refused(data: bytes, params: video.VideoParams = PARAMS) -> MediaFailure:
    with pytest.raises(MediaFailure) as info:
        video.normalise(data, params)
    return info.value


def test_a_small_file_with_huge_frames_is_refused_before_decoding() -> None:
    clip = flat_clip(8192, 8192)
    assert len(clip) < 512 * 1024  # tiny file, 67 million pixels a frame
    failure = refused(clip)
    assert failure.kind == TOO_LARGE
    assert "8192x8192" in failure.reason and "media.video.max_frame_pixels" in failure.reason


_PEAK_RSS = """
import sys
from gateway.media import video
from gateway.media._failure import MediaFailure


def peak_kib():  # this process's own high-water mark (ru_maxrss would carry the parent's over exec)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


import av, PIL.Image  # loaded before the baseline, as in a decode worker
params = video.VideoParams(1.0, 8, 600, 65_536, max_frame_pixels=int(sys.argv[2]))
before = peak_kib()
try:
    result = video.normalise(open(sys.argv[1], "rb").read(), params)
    print("ok", len(result.frames), end=" ")
except MediaFailure as exc:
    print(exc.kind, end=" ")
print((peak_kib() - before) // 1024)
"""


def _peak_mib(path: Path, max_frame_pixels: int) -> tuple[str, int]:
    """(the outcome, how many MiB a fresh process's peak memory grew by in normalise)."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_RSS, str(path), str(max_frame_pixels)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    outcome, *_, grew = done.stdout.split()
    return outcome, int(grew)


def test_a_decode_workers_memory_stays_bounded(tmp_path: Path) -> None:
    huge = tmp_path / "huge.mp4"
    huge.write_bytes(flat_clip(8192, 8192))
    outcome, grew = _peak_mib(huge, 8_847_360)
    assert outcome == TOO_LARGE and grew < 64, grew  # the headers only: no 67-megapixel frame
    # An accepted 4K clip: frames shrunk one by one as decoded, two decoder threads: bounded too.
    uhd = tmp_path / "uhd.mp4"
    uhd.write_bytes(flat_clip(3840, 2160, frames=8))
    outcome, grew = _peak_mib(uhd, 8_847_360)
    assert outcome == "ok" and grew < 200, grew


def test_the_frame_limit_is_a_setting() -> None:
    clip = media_files.video(2.0, size=(320, 240))
    assert video.normalise(clip, PARAMS).source_width == 320
    small = video.VideoParams(1.0, 8, 600, 65_536, max_frame_pixels=320 * 240 - 1)
    assert "320x240" in refused(clip, small).reason


@pytest.mark.parametrize(
    ("codec", "container", "why"),
    [
        ("ffv1", "matroska", "codec (ffv1)"),
        ("ffv1", "avi", "codec (ffv1)"),
        ("mpeg4", "nut", "container"),
        ("flv", "flv", "container"),
    ],
)
def test_codecs_and_containers_off_the_allow_list_are_415(codec: str, container: str, why: str) -> None:
    options: dict[str, str] = {}
    failure = refused(flat_clip(64, 48, codec=codec, container=container, options=options))
    assert failure.kind == UNSUPPORTED and why in failure.reason
    assert "media.video.co" in failure.reason  # names the setting: containers or codecs


def test_the_allow_lists_take_what_they_name() -> None:
    clip = flat_clip(64, 48, codec="ffv1", container="matroska", options={})
    params = video.VideoParams(1.0, 8, 600, 65_536, containers=("matroska",), codecs=("ffv1",))
    assert video.normalise(clip, params).source_codec == "ffv1"


def test_pixels_decoded_past_the_budget_are_413() -> None:
    clip = media_files.video(4.0, size=(320, 240), gop=100)  # one keyframe: every sample decodes on
    budget = video.VideoParams(1.0, 8, 600, 65_536, max_decoded_pixels=320 * 240 * 10)
    failure = refused(clip, budget)
    assert failure.kind == TOO_LARGE and "media.video.max_request_pixels" in failure.reason


async def test_a_requests_videos_share_the_budget(tmp_path: Path) -> None:
    clip = media_files.data_uri("video/mp4", media_files.video(2.0, fps=10, size=(160, 120), gop=10))
    part = {"type": "video_url", "video_url": {"url": clip}}
    # A clip decodes 2 frames of 160x120 for its 2 samples (a keyframe each): 3 fit one clip, not two.
    limits = {"workers": 1, "cache": {"enabled": False}, "video": {"max_request_pixels": 160 * 120 * 3}}
    media = MediaPipeline(msgspec.convert(limits, MediaSettings), tmp_path, MediaTargets())
    try:
        one = msgspec.json.encode({"model": "m", "messages": [{"role": "user", "content": [part]}]})
        assert (await media.prepare(parse_chat_request(one))).summary.videos == 1
        two = msgspec.json.encode({"model": "m", "messages": [{"role": "user", "content": [part, part]}]})
        with pytest.raises(PayloadTooLarge) as info:
            await media.prepare(parse_chat_request(two))
        assert "max_request_pixels" in str(info.value)
    finally:
        await media.aclose()
