"""Media preprocessing of one chat request: fetch, decode, normalise, cache; then summarise.

:meth:`MediaPipeline.prepare` takes a validated request and returns it with every medium
replaced by the normalised form the tiers get (images as ``data:`` URIs of a JPEG/PNG within
the tiers' pixel limits, videos as their sampled frames, audio as 16 kHz mono WAV), the
request's :class:`~router.MediaSummary` for the router and the rate limits, and where the time
went.  A request without media is returned as it is, at no cost.  A refused medium raises a
gateway error (400/413/415/422) whose ``param`` names the part, e.g. ``messages[2].content[1]``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from gateway.errors import (
    GatewayError,
    InvalidRequest,
    PayloadTooLarge,
    RateLimited,
    UnprocessableMedia,
    UnsupportedMediaType,
)
from gateway.media import audio, image, video
from gateway.media._cache import MediaCache, content_key
from gateway.media._config import MediaSettings
from gateway.media._failure import CORRUPT, FORBIDDEN, INVALID, TOO_LARGE, UNSUPPORTED, MediaFailure
from gateway.media._metrics import MediaMetrics
from gateway.media._runner import DecodePool
from gateway.media.fetch import Fetcher
from gateway.wire.chat import (
    AudioPart,
    ChatCompletionRequest,
    FramesPart,
    ImagePart,
    ImageURL,
    InputAudio,
    VideoPart,
)
from router import NO_MEDIA, MediaSummary
from tiers import Capabilities, Modality

_ERRORS: dict[str, type[GatewayError]] = {
    INVALID: InvalidRequest,
    FORBIDDEN: InvalidRequest,
    TOO_LARGE: PayloadTooLarge,
    UNSUPPORTED: UnsupportedMediaType,
    CORRUPT: UnprocessableMedia,
}
_CODES = {FORBIDDEN: "forbidden_url", INVALID: "invalid_media", TOO_LARGE: "media_too_large"}
_KIND = {ImagePart: "image_url", VideoPart: "video_url", AudioPart: "input_audio"}
# Base64 decoding and hashing of larger media run in a thread, off the event loop.
_OFF_LOOP_BYTES = 262_144


@dataclass(frozen=True, slots=True)
class MediaTargets:
    """What the configured tiers can take, which decides how media are normalised."""

    image_max_pixels: int | None = None  # the largest any image-taking tier accepts; None: no limit
    audio: bool = False  # some tier takes audio (a video's audio track is then extracted too)

    @classmethod
    def of(cls, caps: Iterable[Capabilities], *, video_audio: bool = False) -> MediaTargets:
        """For the most any tier takes (each tier's limits are checked later); ``video_audio``:
        videos' audio tracks are extracted for the transcriber too."""
        caps = list(caps)
        pixels = [c.limits.max_image_pixels for c in caps if Modality.IMAGE in c.modalities]
        return cls(
            image_max_pixels=None
            if not pixels or None in pixels
            else max(p for p in pixels if p is not None),
            audio=video_audio or any(Modality.AUDIO in c.modalities for c in caps),
        )


@dataclass(frozen=True, slots=True)
class MediaInfo:
    """What was measured of one medium, for later stages (the bytes themselves are not kept here)."""

    param: str  # messages[i].content[j]
    kind: str  # image, video, audio
    original: dict[str, Any]  # image: width, height, format; video: width, height, fps, seconds, codec;
    # audio: seconds, sample_rate, channels, codec
    sent: dict[str, Any]  # what the tiers get: size, frames, sample rate


def info_of(param: str, result: Any) -> MediaInfo:
    if isinstance(result, image.ImageResult):
        original = {
            "width": result.original_width,
            "height": result.original_height,
            "aspect_ratio": round(result.aspect_ratio, 4),
            "format": result.original_format,
        }
        return MediaInfo(param, "image", original, {"width": result.width, "height": result.height})
    if isinstance(result, video.VideoResult):
        original = {
            "width": result.source_width,
            "height": result.source_height,
            "fps": result.fps,
            "seconds": result.seconds,
            "codec": result.source_codec,
        }
        sent = {"frames": len(result.frames), "width": result.width, "height": result.height}
        return MediaInfo(param, "video", original, sent)
    original = {
        "seconds": result.seconds,
        "sample_rate": result.source_rate,
        "channels": result.source_channels,
        "codec": result.source_codec,
    }
    return MediaInfo(param, "audio", original, {"sample_rate": result.sample_rate, "channels": 1})


@dataclass(slots=True)
class Prepared:
    request: ChatCompletionRequest
    summary: MediaSummary = NO_MEDIA
    media: list[MediaInfo] = field(default_factory=list)  # one per medium, in request order
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds, over all parts
    cache_hits: int = 0
    cache_misses: int = 0


def has_media(request: ChatCompletionRequest) -> bool:
    for message in request.messages:
        if isinstance(message.content, list):
            for part in message.content:
                if isinstance(part, ImagePart | VideoPart | AudioPart):
                    return True
    return False


def split_data_uri(uri: str) -> tuple[str, str]:
    """``data:<mime>;base64,<payload>`` → (mime, payload)."""
    head, sep, payload = uri.partition(",")
    if not sep or not head.startswith("data:"):
        raise MediaFailure(INVALID, "malformed data: URI (expected data:<type>;base64,<data>)")
    params = head[5:].split(";")
    if "base64" not in params[1:]:
        raise MediaFailure(INVALID, "data: URIs must be base64-encoded (data:<type>;base64,<data>)")
    return params[0].strip().lower(), payload


def data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


class MediaPipeline:
    def __init__(
        self,
        settings: MediaSettings,
        data_path: Path,
        targets: MediaTargets,
        *,
        metrics: MediaMetrics | None = None,
        fetcher: Fetcher | None = None,
    ) -> None:
        self._settings = settings
        self._targets = targets
        self._metrics = metrics
        self._fetcher = fetcher or Fetcher(settings.fetch, settings.max_part_bytes)
        self._pool = DecodePool(settings.workers)
        self._cache: MediaCache | None = None
        if settings.cache.enabled:
            directory = Path(settings.cache.directory).expanduser() if settings.cache.directory else None
            self._cache = MediaCache(directory or data_path / "cache" / "media", settings.cache)
        image_pixels = settings.image.max_pixels
        if targets.image_max_pixels is not None:
            image_pixels = min(image_pixels, targets.image_max_pixels)
        self._image_pixels = image_pixels
        self._in_flight = 0  # parts of all requests being fetched or decoded now

    async def start(self) -> None:
        await self._pool.start()

    async def aclose(self) -> None:
        await self._fetcher.aclose()
        await asyncio.to_thread(self._pool.close)
        if self._cache is not None:
            self._cache.close()

    async def prepare(self, request: ChatCompletionRequest) -> Prepared:
        if not has_media(request):
            return Prepared(request)
        prepared = Prepared(request)
        jobs: list[tuple[int, int, ImagePart | VideoPart | AudioPart]] = []
        for i, message in enumerate(request.messages):
            if isinstance(message.content, list):
                for j, part in enumerate(message.content):
                    if isinstance(part, ImagePart | VideoPart | AudioPart):
                        jobs.append((i, j, part))
        if len(jobs) > self._settings.max_parts:
            i, j, _ = jobs[self._settings.max_parts]
            raise PayloadTooLarge(
                f"the request carries {len(jobs)} media parts; at most {self._settings.max_parts} are "
                f"accepted (setting media.max_parts)",
                param=f"messages[{i}].content[{j}]",
                code="too_many_media_parts",
            )
        videos = sum(isinstance(part, VideoPart) for _, _, part in jobs)
        cap = self._settings.max_in_flight
        if self._in_flight + len(jobs) > cap:
            raise RateLimited(
                f"the gateway is preparing {self._in_flight} media parts (at most {cap} at once, setting "
                "media.max_in_flight); retry after the Retry-After seconds",
                retry_after_s=1.0,
                reason="media_busy",
            )
        self._in_flight += len(jobs)
        try:
            results = await asyncio.gather(
                *(self._one(i, j, part, prepared, videos) for i, j, part in jobs), return_exceptions=True
            )
        finally:
            self._in_flight -= len(jobs)
        for result in results:  # the first refused part, in request order
            if isinstance(result, BaseException):
                raise result
        done: list[tuple[Any, Any]] = [r for r in results if not isinstance(r, BaseException)]
        replaced = {(i, j): new for (i, j, _), (new, _) in zip(jobs, done, strict=True)}
        messages = []
        for i, message in enumerate(request.messages):
            if isinstance(message.content, list):
                content = [replaced.get((i, j), part) for j, part in enumerate(message.content)]
                message = msgspec.structs.replace(message, content=content)
            messages.append(message)
        prepared.request = msgspec.structs.replace(request, messages=messages)
        prepared.summary = _summary([result for _, result in done])
        prepared.media = [
            info_of(f"messages[{i}].content[{j}]", r) for (i, j, _), (_, r) in zip(jobs, done, strict=True)
        ]
        if self._metrics is not None:
            self._metrics.observe(prepared)
        return prepared

    async def audio_clip(self, data: bytes, param: str, max_seconds: float) -> audio.AudioResult:
        """One audio file (a transcription's): decoded in the pool, bounded and cached as a chat
        request's audio is; a refused file is the same 4xx, naming ``param``."""
        s = self._settings.audio
        params = audio.AudioParams(s.sample_rate, min(s.max_seconds, max_seconds))
        try:
            result: audio.AudioResult = await self._decoded("audio", data, params, audio.normalise, None)
        except MediaFailure as exc:
            error = _ERRORS.get(exc.kind, InvalidRequest)(f"{param}: {exc.reason}", param=param)
            error.code = _CODES.get(exc.kind, error.code)
            raise error from exc
        return result

    async def _one(
        self, i: int, j: int, part: ImagePart | VideoPart | AudioPart, prepared: Prepared, videos: int = 1
    ) -> tuple[Any, Any]:
        """(the part as the tiers get it, the decoder's result); ``videos``: how many the request has."""
        where = f"messages[{i}].content[{j}]"
        try:
            if isinstance(part, ImagePart):
                return await self._image(part, prepared)
            if isinstance(part, VideoPart):
                return await self._video(part, prepared, videos)
            return await self._audio(part, prepared)
        except MediaFailure as exc:
            cls = _ERRORS.get(exc.kind, InvalidRequest)
            error = cls(f"{where} ({_KIND[type(part)]}): {exc.reason}", param=where)
            if exc.kind in _CODES:
                error.code = _CODES[exc.kind]
            raise error from exc

    async def _bytes(self, url: str, family: str, prepared: Prepared) -> tuple[bytes, str]:
        """The medium's bytes and declared MIME type, from a data: URI or a download."""
        started = time.perf_counter()
        if url.startswith("data:"):
            mime, payload = split_data_uri(url)
            data = await self._b64(payload)
        else:
            fetched = await self._fetcher.fetch(url)
            data, mime = fetched.data, fetched.content_type.lower()
        _add(prepared.timings, "fetch_s", time.perf_counter() - started)
        if mime and mime != "application/octet-stream" and not mime.startswith(family + "/"):
            raise MediaFailure(UNSUPPORTED, f"declared as {mime}, not {family}/*")
        return data, mime

    async def _b64(self, payload: str) -> bytes:
        if len(payload) * 3 // 4 > self._settings.max_part_bytes:
            raise MediaFailure(
                TOO_LARGE,
                f"the medium is over {self._settings.max_part_bytes} bytes (setting media.max_part_bytes)",
            )
        try:
            if len(payload) > _OFF_LOOP_BYTES:
                return await asyncio.to_thread(base64.b64decode, payload, validate=True)
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MediaFailure(INVALID, f"invalid base64: {exc}") from exc

    async def _decoded(
        self, kind: str, data: bytes, params: Any, fn: Callable[..., Any], prepared: Prepared | None
    ) -> Any:
        """``prepared``: the chat request's, which counts the hits and times (None: a lone file)."""
        timings: dict[str, float] = prepared.timings if prepared is not None else {}
        if len(data) > _OFF_LOOP_BYTES:
            key = await asyncio.to_thread(content_key, kind, data, params)
        else:
            key = content_key(kind, data, params)
        if self._cache is not None:
            started = time.perf_counter()
            hit = await self._cache.get(key)
            _add(timings, "cache_s", time.perf_counter() - started)
            if hit is not None:
                if prepared is not None:
                    prepared.cache_hits += 1
                return hit
        if prepared is not None:
            prepared.cache_misses += 1
        started = time.perf_counter()
        result = await self._pool.run(fn, self._settings.timeout_s, data, params)
        # The round trip through the process pool (queueing, transfer, work); the worker's own stages follow.
        _add(timings, f"{kind}_pool_s", time.perf_counter() - started)
        for stage, seconds in result.timings.items():
            _add(timings, f"{kind}_{stage}", seconds)
        if self._cache is not None:
            await self._cache.put(key, result)
        return result

    async def _image(self, part: ImagePart, prepared: Prepared) -> tuple[ImagePart, image.ImageResult]:
        data, mime = await self._bytes(part.image_url.url, "image", prepared)
        s = self._settings.image
        params = image.ImageParams(s.max_source_pixels, self._image_pixels, s.jpeg_quality, mime)
        result: image.ImageResult = await self._decoded("image", data, params, image.normalise, prepared)
        return ImagePart(ImageURL(data_uri(result.mime, result.data), part.image_url.detail)), result

    async def _video(
        self, part: VideoPart, prepared: Prepared, videos: int
    ) -> tuple[FramesPart, video.VideoResult]:
        data, _ = await self._bytes(part.video_url.url, "video", prepared)
        s = self._settings.video
        params = video.VideoParams(
            s.sample_fps,
            s.max_frames,
            s.max_seconds,
            min(s.frame_max_pixels, self._image_pixels),
            max_frame_pixels=s.max_frame_pixels,
            max_decoded_pixels=s.max_request_pixels // max(1, videos),
            containers=tuple(s.containers),
            codecs=tuple(s.codecs),
            with_audio=self._targets.audio,
            audio_rate=self._settings.audio.sample_rate,
        )
        result: video.VideoResult = await self._decoded("video", data, params, video.normalise, prepared)
        frames = [ImageURL(data_uri("image/jpeg", f)) for f in result.frames]
        track = InputAudio(base64.b64encode(result.audio_wav).decode(), "wav") if result.audio_wav else None
        return FramesPart(frames, result.frame_times, result.seconds, result.fps, track), result

    async def _audio(self, part: AudioPart, prepared: Prepared) -> tuple[AudioPart, audio.AudioResult]:
        raw = part.input_audio.data
        if raw.startswith("data:"):
            _, raw = split_data_uri(raw)
        data = await self._b64(raw)
        s = self._settings.audio
        params = audio.AudioParams(s.sample_rate, s.max_seconds, part.input_audio.format)
        result: audio.AudioResult = await self._decoded("audio", data, params, audio.normalise, prepared)
        return AudioPart(InputAudio(base64.b64encode(result.wav).decode(), "wav")), result


def _add(timings: dict[str, float], stage: str, seconds: float) -> None:
    timings[stage] = timings.get(stage, 0.0) + seconds


def _summary(results: list[Any]) -> MediaSummary:
    images = pixels = videos = frames = clips = 0
    video_s = audio_s = 0.0
    for result in results:
        if isinstance(result, image.ImageResult):
            images += 1
            pixels += result.pixels
        elif isinstance(result, video.VideoResult):
            videos += 1
            video_s += result.seconds
            frames += len(result.frames)
        elif isinstance(result, audio.AudioResult):
            clips += 1
            audio_s += result.seconds
    return MediaSummary(images, pixels, videos, video_s, frames, clips, audio_s)
