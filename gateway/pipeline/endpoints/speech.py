"""The path of one transcription or translation (``POST /v1/audio/transcriptions``, ``/translations``):
the chat pipeline's stages, in its order, through the same front and the same ending.

     1 authenticate   the API key → the caller and its tenant          Front.caller
     2 parse          OpenAI's multipart form, strictly and bounded      gateway/wire/audio.py
       model          the speech model's name or an alias (whisper-1), else 404
     3 limit          the tenant's requests and audio clips per minute   Front.admit
     4 media          the file decoded in the decode pool (any format FFmpeg reads; corrupt, too long or
                      silent files refused there, 4xx); then its seconds charged to the tenant's
                      audio-seconds limit (429 past it)
     8 transcribe     Whisper, off the event loop, a bounded number at once (429 beyond)
       residency      the tenant's rules on the transcript: a ``refuse`` is a 400 (a stream checks the
                      text before sending it, so it is sent whole at the end when rules are set)
     9 frame          json, text, srt, verbose_json, vtt, or server-sent events (the caller writes them)
    10 end            one ledger row (endpoint "transcriptions" or "translations"), priced by the
                      seconds of audio at the ``speech`` tier's ``per_media_second``

Cache-Control: transcripts are not kept in the result cache (``X-Tiergate-Cache: bypass``); the decoded
audio is, in the media cache, by content.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from gateway.accounts.tenants import Demand
from gateway.errors import ModelNotFound, error_body, to_gateway_error
from gateway.media import MediaPipeline
from gateway.pipeline.answer import Routed
from gateway.pipeline.answers.exact import CacheStatus
from gateway.pipeline.ending import Ending
from gateway.pipeline.endpoints.hearing import samples_of
from gateway.pipeline.front import Front, Incoming
from gateway.pipeline.record import Call
from gateway.pipeline.tierset import Catalogue
from gateway.residency import Verdict
from gateway.wire.audio import SpeechRequest, delta_event, done_event, parse_speech_request, render
from tiers import Usage
from tiers.speech import (
    DEFAULT_SPEECH_MODEL_DIR,
    Asked,
    Heard,
    Segment,
    SpeechConfig,
    Transcriber,
    Transcript,
)

TRANSCRIPTIONS = "/v1/audio/transcriptions"
TRANSLATIONS = "/v1/audio/translations"
Task = Literal["transcribe", "translate"]
_ENDPOINT = {"transcribe": "transcriptions", "translate": "translations"}


def speech_config(config: SpeechConfig, build_cache_dir: str) -> SpeechConfig:
    """``config`` with an empty model folder filled from the build cache."""
    folder = config.model_dir or str(Path(build_cache_dir).expanduser() / DEFAULT_SPEECH_MODEL_DIR)
    return msgspec.structs.replace(config, model_dir=folder)


@dataclass(frozen=True, slots=True)
class SpeechAnswer:
    routed: Routed  # what its X-Tiergate-* headers say
    body: bytes = b""  # a whole answer ...
    media_type: str = "application/json"
    events: AsyncGenerator[bytes, None] | None = None  # ... or a stream's server-sent events


class SpeechPipeline:
    def __init__(
        self,
        transcriber: Transcriber,
        front: Front,
        ending: Ending,
        media: MediaPipeline,
        catalogue: Catalogue | None = None,
    ) -> None:
        """``catalogue``: the other endpoints' models, named in the error for one of them named here."""
        self._catalogue = catalogue or Catalogue()
        self.transcriber = transcriber
        self._front = front
        self._ending = ending
        self._media = media

    @property
    def model_names(self) -> list[str]:
        """What ``model`` may name (none when the model is not built)."""
        return sorted(self.transcriber.names)

    async def run(self, incoming: Incoming, task: Task, max_file_bytes: int) -> SpeechAnswer:
        started = time.perf_counter()
        caller = await self._front.caller(incoming)  # 1 authenticate
        body = await incoming.body()
        request = parse_speech_request(body, incoming.headers.get("content-type", ""), task, max_file_bytes)
        call = self._front.begin(caller, incoming, request.model)  # the ledger's; its cost tags
        incoming.noted(call.tenant.name, request.model)
        try:
            self._check(request, task)  # 2 the model: 404
            await self._front.admit(call, Demand(audio=1))  # 3 limit: the request and its clip
            clip = await self._media.audio_clip(request.audio, "file", self.transcriber.config.max_seconds)
            seconds = math.ceil(clip.seconds)
            call.demand = Demand(audio=1, audio_seconds=seconds)  # what the ledger prices
            await self._front.admit(call, Demand(audio_seconds=seconds, request=False))  # its seconds
            pcm = samples_of(clip.wav)
            asked = Asked(request.task, request.language, request.prompt, request.temperature, request.words)
            if request.stream and not self._front.rules(call.tenant.name):
                events = self.transcriber.segments(pcm, asked)
                await anext(events)  # loaded, let in, the language heard: a failure is still a 4xx/5xx
                routed = self._routed(call, started)
                return SpeechAnswer(routed, events=self._streamed(call, routed, events))
            transcript = await self.transcriber.transcribe(pcm, asked)  # 8 transcribe
            self._residency(call, transcript.text)
        except BaseException as exc:  # refused, or its client left
            self._ending.refused(call, exc)
            raise
        routed = self._routed(call, started)
        await self._ending.completed(call, routed, self.transcriber.model, Usage(0, transcript.tokens))
        if request.stream:  # the tenant has residency rules: the whole text, checked, then sent
            return SpeechAnswer(routed, events=_replayed(transcript))
        text, media_type = render(transcript, request)
        return SpeechAnswer(routed, text, media_type)

    def _routed(self, call: Call, started: float) -> Routed:
        device = self.transcriber.device or "cpu"
        reason = (
            f"{self.transcriber.name}: {self.transcriber.model} on {device}" + Verdict(call.residency).note
        )
        return Routed(self.transcriber.name, reason, CacheStatus.BYPASS, (), time.perf_counter() - started)

    def _check(self, request: SpeechRequest, task: Task) -> None:
        if request.model not in self.transcriber.names:
            if misplaced := self._catalogue.misplaced(request.model, _ENDPOINT[task]):
                raise misplaced
            shown = ", ".join(self.model_names) or "none (the speech model is not built: scripts/setup.sh)"
            path = TRANSCRIPTIONS if task == "transcribe" else TRANSLATIONS
            raise ModelNotFound(
                f"The model `{request.model[:256]}` does not exist for {path}; use one of: {shown}",
                param="model",
            )

    def _residency(self, call: Call, text: str) -> None:
        """The tenant's rules on the transcript (a ``refuse``: 400). The transcriber runs here, so a
        ``keep_local`` rule holds already, and the text goes back only to its own client."""
        if self._front.rules(call.tenant.name):
            self._front.residency(call, [{"role": "user", "content": text}], "file")

    async def _streamed(
        self, call: Call, routed: Routed, events: AsyncGenerator[Heard | Segment, None]
    ) -> AsyncGenerator[bytes, None]:
        """Each segment's text as a ``transcript.text.delta`` as Whisper finishes it, then the whole
        text; the ledger row is written before the last event, or as 499 if the client leaves."""
        texts: list[str] = []
        tokens = 0
        try:
            async for item in events:
                if isinstance(item, Segment):
                    piece = item.text if texts else item.text.lstrip()
                    texts.append(piece)
                    tokens += len(item.tokens)
                    yield delta_event(piece)
        except Exception as exc:  # the answer has begun: it ends with OpenAI's error event
            self._ending.refused(call, exc)
            body = error_body(to_gateway_error(exc))
            yield b"data: " + msgspec.json.encode({"type": "error", **body}) + b"\n\n"
            return
        except BaseException as exc:  # its client left
            self._ending.refused(call, exc)
            raise
        finally:
            await events.aclose()
        await self._ending.completed(call, routed, self.transcriber.model, Usage(0, tokens))
        yield done_event("".join(texts).strip(), tokens)


async def _replayed(transcript: Transcript) -> AsyncGenerator[bytes, None]:
    for i, segment in enumerate(transcript.segments):
        yield delta_event(segment.text if i else segment.text.lstrip())
    yield done_event(transcript.text, transcript.tokens)
