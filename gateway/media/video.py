"""Video with PyAV: duration, fps and size from the headers, frames sampled by seeking.

For each sample time the demuxer seeks to the keyframe at or before it and decodes forward
only to that time; a target close ahead of the last decoded frame (within ``_SEEK_GAP_S``) is
reached by decoding on instead.  So a 1 fps sample of a clip with a keyframe every second or
two decodes a small share of its frames, not all of them.

Bounded before and while decoding: only the allowed demuxers open the file (FFmpeg's own
``format_whitelist``) and only the allowed codecs are decoded; a frame size over
``max_frame_pixels`` in the headers is refused before any frame is decoded, and the decoder itself
refuses larger frames later in the stream (``max_pixels``); the pixels decoded for one clip stop at
``max_decoded_pixels``; each sampled frame is shrunk and encoded as soon as it is decoded, and the
decoder runs on at most ``_THREADS`` threads, so a worker holds a few frames at a time, whatever
the clip.
"""

from __future__ import annotations

import io
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.media._failure import CORRUPT, TOO_LARGE, UNSUPPORTED, MediaFailure
from gateway.media.audio import _open, decode_track, duration_of
from gateway.media.image import target_size

_SEEK_GAP_S = 0.5
_THREADS = 2  # frame threads hold a frame each: a bound on the decoder's memory


@dataclass(frozen=True, slots=True)
class VideoParams:
    sample_fps: float
    max_frames: int
    max_seconds: float
    frame_max_pixels: int  # each frame sent on is shrunk to at most this
    max_frame_pixels: int = 8_847_360  # a source frame larger than this is refused (4096 x 2160)
    max_decoded_pixels: int = 2_000_000_000  # pixels decoded for this clip, at most
    containers: tuple[str, ...] = ()  # FFmpeg demuxer names accepted; empty: any
    codecs: tuple[str, ...] = ()  # FFmpeg codec names accepted; empty: any
    jpeg_quality: int = 85
    with_audio: bool = False  # also extract the audio track (when a tier takes audio)
    audio_rate: int = 16_000


@dataclass(frozen=True, slots=True)
class VideoResult:
    frames: list[bytes]  # JPEG, in time order
    frame_times: list[float]  # seconds from the start
    width: int  # of the frames sent on
    height: int
    seconds: float
    fps: float
    source_width: int
    source_height: int
    source_codec: str
    decoded_frames: int  # how many frames were decoded to take the samples
    audio_wav: bytes | None = None
    audio_seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)


def _shrunk(frame: Any, goal: tuple[int, int]) -> Any:
    """The frame scaled to ``goal`` by FFmpeg's scaler (no full-size RGB copy is made)."""
    return frame.reformat(width=goal[0], height=goal[1], format="rgb24").to_image()


def sample_times(seconds: float, sample_fps: float, max_frames: int) -> list[float]:
    """``sample_fps`` over the clip, or ``max_frames`` spread evenly when that would be more."""
    wanted = max(1, math.ceil(seconds * sample_fps - 1e-9))
    if wanted <= max_frames:
        return [i / sample_fps for i in range(wanted)]
    return [i * seconds / max_frames for i in range(max_frames)]


class _Budget:
    """Pixels decoded so far for one clip, refused past the limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, frame: Any, max_frame_pixels: int) -> None:
        pixels = frame.width * frame.height
        if pixels > max_frame_pixels:
            raise MediaFailure(TOO_LARGE, _frame_too_large(frame.width, frame.height, max_frame_pixels))
        self.used += pixels
        if self.used > self.limit:
            raise MediaFailure(
                TOO_LARGE,
                f"decoding the sampled frames takes over {self.limit} pixels "
                "(media.video.max_request_pixels, shared by the request's videos); "
                "send a shorter or smaller clip, or fewer videos",
            )


def _frame_too_large(width: int, height: int, limit: int) -> str:
    return (
        f"the video's frames are {width}x{height} ({width * height} pixels); at most {limit} pixels "
        "a frame are decoded (media.video.max_frame_pixels)"
    )


def _frames_at(
    container: Any,
    stream: Any,
    times: list[float],
    fps: float,
    params: VideoParams,
    keep: Callable[[Any], None],
) -> tuple[list[float], int]:
    """Decode the frames shown at ``times`` (seek to each keyframe, decode forward); each one is
    handed to ``keep`` at once (so no full-size frame is held)."""
    import av

    base = stream.time_base
    start = float(stream.start_time * base) if stream.start_time is not None else 0.0
    half_frame = 0.5 / fps if fps > 0 else 0.0
    budget = _Budget(params.max_decoded_pixels)
    taken: list[float] = []
    decoded = 0
    decoder = None
    position = -math.inf  # time of the last decoded frame
    try:
        for t in times:
            if decoder is None or t - position > _SEEK_GAP_S:
                container.seek(int((start + t) / base), stream=stream, backward=True, any_frame=False)
                decoder = container.decode(stream)
            for frame in decoder:
                decoded += 1
                budget.take(frame, params.max_frame_pixels)
                shown = (frame.time if frame.time is not None else position) - start
                position = shown
                if shown + half_frame >= t:
                    keep(frame)
                    taken.append(max(shown, 0.0))
                    break
            else:
                break  # the clip ended before t
    except av.error.FFmpegError as exc:
        raise MediaFailure(CORRUPT, f"the video cannot be decoded: {exc}") from exc
    return taken, decoded


_OVER_MAX_PIXELS = re.compile(r"Picture size (\d+)x(\d+) exceeds specified max pixel count")


def _open_video(data: bytes, params: VideoParams) -> tuple[Any, tuple[int, int] | None]:
    """The container, opened by an allowed demuxer only, and the frame size FFmpeg's probing refused
    as over ``max_frame_pixels`` (its streams then show no size), if it did."""
    import av
    import av.logging

    options = {"max_pixels": str(params.max_frame_pixels)}  # the decoders that probe the streams
    if params.containers:
        options["format_whitelist"] = ",".join(params.containers)
    level = av.logging.get_level()
    av.logging.set_level(av.logging.ERROR)
    try:
        with av.logging.Capture() as logs:
            container = _open(data, options)
    except MediaFailure as exc:
        if params.containers and isinstance(exc.__cause__, av.error.ArgumentError):
            raise MediaFailure(
                UNSUPPORTED,
                "the video's container is not one this gateway opens (media.video.containers: "
                f"{', '.join(params.containers)})",
            ) from exc
        raise
    finally:
        av.logging.set_level(level)
    for _, _, message in logs:
        if found := _OVER_MAX_PIXELS.search(message):
            return container, (int(found[1]), int(found[2]))
    return container, None


def _check_stream(
    container: Any, stream: Any, params: VideoParams, refused_size: tuple[int, int] | None
) -> None:
    """Refuse a clip by its demuxer, codec and frame size, before any frame is decoded."""
    names = set(container.format.name.split(","))
    if params.containers and not names & set(params.containers):
        raise MediaFailure(
            UNSUPPORTED,
            f"the video's container ({container.format.name}) is not one this gateway opens "
            f"(media.video.containers: {', '.join(params.containers)})",
        )
    ctx = stream.codec_context
    if ctx is None or not ctx.name:
        raise MediaFailure(UNSUPPORTED, "the video's codec is not one this gateway can decode")
    codec = ctx.codec.canonical_name
    if params.codecs and codec not in params.codecs:
        raise MediaFailure(
            UNSUPPORTED,
            f"the video's codec ({codec}) is not one this gateway decodes "
            f"(media.video.codecs: {', '.join(params.codecs)})",
        )
    width, height = ctx.width, ctx.height
    if width * height <= 0 and refused_size is not None:
        width, height = refused_size
    if width * height <= 0:
        raise MediaFailure(CORRUPT, "the video has no frame size")
    if width * height > params.max_frame_pixels:
        raise MediaFailure(TOO_LARGE, _frame_too_large(width, height, params.max_frame_pixels))


def normalise(data: bytes, params: VideoParams) -> VideoResult:
    started = time.perf_counter()
    container, refused_size = _open_video(data, params)
    with container:
        if not container.streams.video:
            raise MediaFailure(UNSUPPORTED, "the medium has no video track")
        stream = container.streams.video[0]
        _check_stream(container, stream, params, refused_size)
        ctx = stream.codec_context
        seconds = duration_of(container, stream)
        if seconds is None or seconds <= 0:
            raise MediaFailure(CORRUPT, "the video's duration cannot be read")
        if seconds > params.max_seconds:
            raise MediaFailure(
                TOO_LARGE, f"the video is {seconds:.1f} s long; at most {params.max_seconds:g} s are accepted"
            )
        fps = float(stream.average_rate or stream.guessed_rate or 0.0)
        width, height = ctx.width, ctx.height
        opened = time.perf_counter()
        ctx.options = {"max_pixels": str(params.max_frame_pixels)}  # frames that grow mid-stream
        stream.thread_type = "AUTO"
        ctx.thread_count = _THREADS
        goal = target_size(width, height, params.frame_max_pixels)
        frames: list[bytes] = []
        encoding = [0.0]

        def keep(frame: Any) -> None:
            began = time.perf_counter()
            out = io.BytesIO()
            _shrunk(frame, goal).save(out, "JPEG", quality=params.jpeg_quality)
            frames.append(out.getvalue())
            encoding[0] += time.perf_counter() - began

        times = sample_times(seconds, params.sample_fps, params.max_frames)
        taken, decoded = _frames_at(container, stream, times, fps, params, keep)
        if not frames:
            raise MediaFailure(CORRUPT, "no frame of the video could be decoded")
        encoded = time.perf_counter()
        sampled = encoded - encoding[0]
    audio_wav, audio_seconds = None, 0.0
    if params.with_audio:
        with _open_video(data, params)[0] as again:
            if again.streams.audio:
                audio_wav, audio_seconds = decode_track(
                    again, again.streams.audio[0], params.audio_rate, params.max_seconds
                )
    done = time.perf_counter()
    return VideoResult(
        frames=frames,
        frame_times=taken,
        width=goal[0],
        height=goal[1],
        seconds=seconds,
        fps=fps,
        source_width=width,
        source_height=height,
        source_codec=ctx.name,
        decoded_frames=decoded,
        audio_wav=audio_wav,
        audio_seconds=audio_seconds,
        timings={
            "open_s": opened - started,
            "sample_s": sampled - opened,  # seeking and decoding; shrinking and encoding: encode_s
            "encode_s": encoded - sampled,
            "audio_s": done - encoded,
        },
    )
