"""Audio with PyAV: any container/codec FFmpeg decodes, downmixed to mono, resampled, as WAV."""

from __future__ import annotations

import io
import time
import wave
from dataclasses import dataclass, field
from typing import Any

from gateway.media._failure import CORRUPT, TOO_LARGE, UNSUPPORTED, MediaFailure

# input_audio formats a client may name, and the FFmpeg demuxers each may be.
FORMATS: dict[str, tuple[str, ...]] = {
    "wav": ("wav",),
    "mp3": ("mp3",),
    "ogg": ("ogg",),
    "opus": ("ogg", "webm", "matroska"),
    "flac": ("flac",),
    "m4a": ("mov", "mp4", "m4a"),
    "aac": ("aac", "mov", "mp4"),
    "webm": ("matroska", "webm"),
}


@dataclass(frozen=True, slots=True)
class AudioParams:
    sample_rate: int
    max_seconds: float
    declared_format: str = ""  # input_audio.format; checked against the container


@dataclass(frozen=True, slots=True)
class AudioResult:
    wav: bytes  # 16-bit PCM, mono, at sample_rate
    seconds: float
    sample_rate: int
    source_codec: str
    source_rate: int
    source_channels: int
    timings: dict[str, float] = field(default_factory=dict)


def _open(data: bytes, options: dict[str, str] | None = None) -> Any:
    """The medium as a PyAV container; ``options`` go to the demuxer and to the decoders that probe
    the streams (e.g. ``format_whitelist``, ``max_pixels``)."""
    import av

    if not data:
        raise MediaFailure(CORRUPT, "the medium is empty (zero bytes)")
    try:
        return av.open(io.BytesIO(data), mode="r", metadata_errors="ignore", options=options)
    except av.error.InvalidDataError as exc:
        raise MediaFailure(
            CORRUPT, "not a readable audio/video file (corrupt, truncated, or a format FFmpeg does not know)"
        ) from exc
    except av.error.FFmpegError as exc:
        raise MediaFailure(CORRUPT, f"the medium cannot be read: {exc}") from exc


def duration_of(container: Any, stream: Any) -> float | None:
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration / 1_000_000)
    return None


def wav_claim(data: bytes) -> float | None:
    """Seconds a RIFF/WAVE header says its data holds, or None (not a WAV, or a streamed one whose size
    is left open). FFmpeg trusts the file's real size over the header, so a header claiming hours over a
    second of samples would otherwise pass unseen; it is refused as what it claims to be."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    at, byte_rate = 12, 0
    while at + 8 <= min(len(data), 65_536):  # the chunks before the samples; a header is not longer
        chunk, size = data[at : at + 4], int.from_bytes(data[at + 4 : at + 8], "little")
        if chunk == b"fmt " and at + 16 <= len(data):
            byte_rate = int.from_bytes(data[at + 16 : at + 20], "little")
        elif chunk == b"data":
            if byte_rate <= 0 or size in (0, 0xFFFFFFFF):
                return None
            return size / byte_rate
        at += 8 + size + (size & 1)
    return None


def decode_track(container: Any, stream: Any, sample_rate: int, max_seconds: float) -> tuple[bytes, float]:
    """Decode one audio stream to mono 16-bit PCM at ``sample_rate``; WAV bytes and seconds."""
    import av
    import numpy as np

    resampler = av.AudioResampler(format="s16", layout="mono", rate=sample_rate)
    chunks: list[Any] = []
    samples = 0
    limit = int(max_seconds * sample_rate)
    try:
        for frame in container.decode(stream):
            for out in resampler.resample(frame):
                chunks.append(out.to_ndarray().reshape(-1))
                samples += out.samples
            if samples > limit:
                raise MediaFailure(TOO_LARGE, f"the audio is longer than {max_seconds:g} s")
        for out in resampler.resample(None):
            chunks.append(out.to_ndarray().reshape(-1))
            samples += out.samples
    except av.error.FFmpegError as exc:
        raise MediaFailure(CORRUPT, f"the audio cannot be decoded: {exc}") from exc
    if samples == 0:
        raise MediaFailure(CORRUPT, "the audio track holds no decodable samples")
    pcm = np.concatenate(chunks).astype("<i2").tobytes()
    out_buf = io.BytesIO()
    with wave.open(out_buf, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(sample_rate)
        wav.writeframes(pcm)
    return out_buf.getvalue(), samples / sample_rate


def normalise(data: bytes, params: AudioParams) -> AudioResult:
    started = time.perf_counter()
    container = _open(data)
    with container:
        if params.declared_format:
            allowed = FORMATS.get(params.declared_format.lower())
            if allowed is None:
                raise MediaFailure(
                    UNSUPPORTED, f"audio format {params.declared_format!r} is not one of {', '.join(FORMATS)}"
                )
            names = set(container.format.name.split(","))
            if not names & set(allowed):
                raise MediaFailure(
                    UNSUPPORTED,
                    f"declared as {params.declared_format} but the data is {container.format.name}",
                )
        if not container.streams.audio:
            raise MediaFailure(UNSUPPORTED, "the medium has no audio track")
        stream = container.streams.audio[0]
        declared = max(duration_of(container, stream) or 0.0, wav_claim(data) or 0.0)
        if declared > params.max_seconds:
            raise MediaFailure(
                TOO_LARGE,
                f"the audio is {declared:.1f} s long; at most {params.max_seconds:g} s are accepted",
            )
        codec = stream.codec_context.name
        rate, channels = stream.codec_context.sample_rate, stream.codec_context.channels
        opened = time.perf_counter()
        wav, seconds = decode_track(container, stream, params.sample_rate, params.max_seconds)
    done = time.perf_counter()
    return AudioResult(
        wav=wav,
        seconds=seconds,
        sample_rate=params.sample_rate,
        source_codec=codec,
        source_rate=rate,
        source_channels=channels,
        timings={"open_s": opened - started, "decode_s": done - opened},
    )
