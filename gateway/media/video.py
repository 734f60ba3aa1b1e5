"""Video with PyAV: duration, fps and size from the headers, frames sampled by seeking.

For each sample time the demuxer seeks to the keyframe at or before it and decodes forward
only to that time; a target close ahead of the last decoded frame (within ``_SEEK_GAP_S``) is
reached by decoding on instead.  So a 1 fps sample of a clip with a keyframe every second or
two decodes a small share of its frames, not all of them.
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass, field
from typing import Any

from gateway.media._failure import CORRUPT, TOO_LARGE, UNSUPPORTED, MediaFailure
from gateway.media.audio import _open, decode_track, duration_of
from gateway.media.image import target_size

_SEEK_GAP_S = 0.5


@dataclass(frozen=True, slots=True)
class VideoParams:
    sample_fps: float
    max_frames: int
    max_seconds: float
    frame_max_pixels: int
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


def sample_times(seconds: float, sample_fps: float, max_frames: int) -> list[float]:
    """``sample_fps`` over the clip, or ``max_frames`` spread evenly when that would be more."""
    wanted = max(1, math.ceil(seconds * sample_fps - 1e-9))
    if wanted <= max_frames:
        return [i / sample_fps for i in range(wanted)]
    return [i * seconds / max_frames for i in range(max_frames)]


def _frames_at(
    container: Any, stream: Any, times: list[float], fps: float
) -> tuple[list[Any], list[float], int]:
    """Decode the frames shown at ``times`` (seek to each keyframe, decode forward)."""
    import av

    base = stream.time_base
    start = float(stream.start_time * base) if stream.start_time is not None else 0.0
    half_frame = 0.5 / fps if fps > 0 else 0.0
    images: list[Any] = []
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
                shown = (frame.time if frame.time is not None else position) - start
                position = shown
                if shown + half_frame >= t:
                    images.append(frame.to_image())
                    taken.append(max(shown, 0.0))
                    break
            else:
                break  # the clip ended before t
    except av.error.FFmpegError as exc:
        raise MediaFailure(CORRUPT, f"the video cannot be decoded: {exc}") from exc
    return images, taken, decoded


def normalise(data: bytes, params: VideoParams) -> VideoResult:
    from PIL import Image

    started = time.perf_counter()
    container = _open(data)
    with container:
        if not container.streams.video:
            raise MediaFailure(UNSUPPORTED, "the medium has no video track")
        stream = container.streams.video[0]
        ctx = stream.codec_context
        if ctx is None or not ctx.name:
            raise MediaFailure(UNSUPPORTED, "the video's codec is not one this gateway can decode")
        seconds = duration_of(container, stream)
        if seconds is None or seconds <= 0:
            raise MediaFailure(CORRUPT, "the video's duration cannot be read")
        if seconds > params.max_seconds:
            raise MediaFailure(
                TOO_LARGE, f"the video is {seconds:.1f} s long; at most {params.max_seconds:g} s are accepted"
            )
        fps = float(stream.average_rate or stream.guessed_rate or 0.0)
        width, height = ctx.width, ctx.height
        if width * height <= 0:
            raise MediaFailure(CORRUPT, "the video has no frame size")
        opened = time.perf_counter()
        stream.thread_type = "AUTO"
        times = sample_times(seconds, params.sample_fps, params.max_frames)
        images, taken, decoded = _frames_at(container, stream, times, fps)
        if not images:
            raise MediaFailure(CORRUPT, "no frame of the video could be decoded")
        sampled = time.perf_counter()
        goal = target_size(images[0].width, images[0].height, params.frame_max_pixels)
        frames = []
        for image in images:
            if image.size != goal:
                image = image.resize(goal, Image.Resampling.BILINEAR)
            out = io.BytesIO()
            image.convert("RGB").save(out, "JPEG", quality=params.jpeg_quality)
            frames.append(out.getvalue())
        encoded = time.perf_counter()
    audio_wav, audio_seconds = None, 0.0
    if params.with_audio:
        with _open(data) as again:
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
            "sample_s": sampled - opened,
            "encode_s": encoded - sampled,
            "audio_s": done - encoded,
        },
    )
