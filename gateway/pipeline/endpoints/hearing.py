"""Audio that no tier can take becomes its transcript.

A chat request's ``input_audio`` part, sent where no candidate tier takes audio now (none accepts it, or
the audio breaker is open on every one that does), is replaced by the transcript Whisper makes of it,
marked as such in the prompt, so the model answers what was said rather than a 400 or a guess. The
answer says so: ``X-Tiergate-Degraded: audio_transcript`` and the route reason. A tenant whose policy
says ``degrade = "fail"`` is refused as before instead.

The transcriber has its own circuit breaker: while it fails, the audio is dropped and the request
served from its text, as when any medium's path is broken (``X-Tiergate-Degraded: audio``).
"""

from __future__ import annotations

import base64
import io
import logging
import wave
from dataclasses import dataclass

import msgspec
import numpy as np

import router
from gateway.pipeline import degrade
from gateway.pipeline.tierset import AUTO_MODEL, TierSet
from gateway.wire.chat import AudioPart, ChatCompletionRequest, FramesPart, TextPart
from tiers import Modality, TierError
from tiers.speech import Transcriber

log = logging.getLogger(__name__)

MARK = "[transcript of audio]: "
VIDEO_MARK = "[transcript of the video's audio]: "
TRANSCRIBED = "audio_transcript"  # in X-Tiergate-Degraded


def samples_of(wav: bytes) -> np.ndarray:
    """16-bit PCM WAV (what the decoders make) → float32 samples in [-1, 1], as Whisper takes them."""
    with wave.open(io.BytesIO(wav), "rb") as reader:
        frames = reader.readframes(reader.getnframes())
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0


@dataclass(frozen=True, slots=True)
class Listened:
    """A chat request once its audio was heard: what goes on, and what its answer must say."""

    request: ChatCompletionRequest
    media: router.MediaSummary
    degraded: tuple[str, ...] = ()  # for X-Tiergate-Degraded
    note: str = ""  # appended to the route reason

    @property
    def changed(self) -> bool:
        return bool(self.degraded)


class Hearing:
    def __init__(self, transcriber: Transcriber, tiers: TierSet) -> None:
        """The transcriber's breaker is the (``transcriber.name``, audio) one on the tiers' board: the
        same thresholds as every other, shown with them (/readyz, the admin page) and shared the same way."""
        self._transcriber = transcriber
        self._tiers = tiers
        self._breakers = tiers.breakers
        self._name = transcriber.name

    def _heard_by_a_tier(self, request: ChatCompletionRequest, allowed: tuple[str, ...]) -> bool:
        """Whether some candidate tier takes audio now (then the router decides, as for any medium);
        ``allowed``: the tiers the request's key may use (empty: all)."""
        pinned = None if request.model == AUTO_MODEL else request.model
        for view in self._tiers.views():
            if (pinned is not None and view.name != pinned) or (allowed and view.name not in allowed):
                continue
            if Modality.AUDIO in view.capabilities.modalities and Modality.AUDIO not in view.open_breakers:
                return True
        return False

    async def listen(
        self,
        request: ChatCompletionRequest,
        media: router.MediaSummary,
        refuse: bool | None,
        allowed: tuple[str, ...] = (),
    ) -> Listened:
        """``request`` with its audio parts as transcripts when no tier can take them (unchanged when one
        can, when there are none, or when ``refuse``: the tenant's policy would rather fail); ``allowed``:
        the tiers its key may use (a tier outside them that hears audio does not count)."""
        tracks = _has_tracks(request)  # videos' audio, extracted for the transcriber ([speech] video_audio)
        if not (media.audio_clips or tracks) or self._heard_by_a_tier(request, allowed):
            return Listened(request, media)
        if refuse or (not media.audio_clips and not self._transcriber.available):
            # what the client sent is left as it was: a track was only taken out to be transcribed
            return Listened(_without_tracks(request) if tracks else request, media)
        audio = (Modality.AUDIO,)
        if not self._transcriber.available or not self._breakers.acquire(self._name, audio):
            return self._dropped(request, media, "transcriber unavailable (its breaker is open)")
        try:
            messages = [await self._message(m) for m in request.messages]
        except TierError as exc:
            log.warning("transcribing a chat request's audio failed: %s", exc)
            self._breakers.record(self._name, audio, ok=False, why=str(exc))
            return self._dropped(request, media, f"transcriber failed: {exc}")
        except BaseException:
            self._breakers.release(self._name, audio)
            raise
        self._breakers.record(self._name, audio, ok=True)
        return Listened(
            msgspec.structs.replace(request, messages=messages),
            degrade.summary_without(media, frozenset({Modality.AUDIO})),
            (TRANSCRIBED,),
            "; audio transcribed to text (no tier takes audio)",
        )

    async def _message(self, message: object) -> object:
        content = getattr(message, "content", None)
        if not isinstance(content, list) or not any(_heard(p) for p in content):
            return message
        parts: list[object] = []
        for part in content:
            if isinstance(part, AudioPart):
                parts.append(TextPart(MARK + await self._text(part.input_audio.data)))
            elif isinstance(part, FramesPart) and part.audio is not None:
                text = await self._text(part.audio.data)
                parts += [degrade.silent(part), TextPart(VIDEO_MARK + text)]
            else:
                parts.append(part)
        return msgspec.structs.replace(message, content=parts)  # type: ignore[type-var]

    async def _text(self, wav_base64: str) -> str:
        transcript = await self._transcriber.transcribe(samples_of(base64.b64decode(wav_base64)))
        return transcript.text

    @staticmethod
    def _dropped(request: ChatCompletionRequest, media: router.MediaSummary, why: str) -> Listened:
        lost = frozenset({Modality.AUDIO})
        return Listened(
            degrade.without(request, lost),
            degrade.summary_without(media, lost),
            ("audio",),
            f"; audio removed: {why}",
        )


def _heard(part: object) -> bool:
    return isinstance(part, AudioPart) or (isinstance(part, FramesPart) and part.audio is not None)


def _has_tracks(request: ChatCompletionRequest) -> bool:
    return any(
        isinstance(p, FramesPart) and p.audio is not None
        for m in request.messages
        if isinstance(m.content, list)
        for p in m.content
    )


def _without_tracks(request: ChatCompletionRequest) -> ChatCompletionRequest:
    messages = [
        msgspec.structs.replace(
            m, content=[degrade.silent(p) if isinstance(p, FramesPart) else p for p in m.content]
        )
        if isinstance(m.content, list)
        else m
        for m in request.messages
    ]
    return msgspec.structs.replace(request, messages=messages)
