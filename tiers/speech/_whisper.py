"""Whisper on CTranslate2 (faster-whisper), in the gateway's process.

The model is loaded once (beside the event loop), and each transcription runs on one of ``workers``
threads (CTranslate2 releases the GIL; each call uses ``threads`` cores). Segments come out as the
decoder finishes them, so a stream can send each at once; a JSON answer collects them. At most
``workers`` run and ``max_waiting`` wait; one more is refused at once (429), not queued.

The audio arrives decoded (16 kHz mono float32): the gateway's decode pool, bounded in time and
length, has already read whatever the client sent, so nothing here parses a hostile file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiers._errors import TierOverloaded, TierUnavailable
from tiers.speech._config import SpeechConfig

log = logging.getLogger(__name__)

SAMPLE_RATE = 16_000  # what Whisper hears
# faster-whisper's own fallback: decode at 0 first, hotter only when the output repeats or is unlikely.
_FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


@dataclass(frozen=True, slots=True)
class Word:
    word: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Segment:
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: tuple[Word, ...] = ()


@dataclass(frozen=True, slots=True)
class Transcript:
    text: str
    language: str
    duration: float  # seconds of audio heard
    segments: tuple[Segment, ...]

    @property
    def tokens(self) -> int:
        return sum(len(s.tokens) for s in self.segments)


@dataclass(frozen=True, slots=True)
class Asked:
    """What the client asked of one transcription."""

    task: str = "transcribe"  # or "translate" (to English)
    language: str | None = None  # None: detected from the first 30 s
    prompt: str | None = None  # earlier text, or words to spell a certain way
    temperature: float = 0.0  # 0: faster-whisper's fallback (hotter only when the output is poor)
    words: bool = False  # word timestamps as well


@dataclass(frozen=True, slots=True)
class Heard:
    """What the decoder says before its first segment: the language (detected or given)."""

    language: str
    duration: float


def _segment(raw: Any) -> Segment:
    words = tuple(Word(w.word, round(float(w.start), 3), round(float(w.end), 3)) for w in raw.words or ())
    return Segment(
        id=int(raw.id) - 1,  # faster-whisper counts from 1, OpenAI from 0
        seek=int(raw.seek),
        start=round(float(raw.start), 3),
        end=round(float(raw.end), 3),
        text=str(raw.text),
        tokens=tuple(int(t) for t in raw.tokens),
        temperature=float(raw.temperature or 0.0),
        avg_logprob=float(raw.avg_logprob),
        compression_ratio=float(raw.compression_ratio),
        no_speech_prob=float(raw.no_speech_prob),
        words=words,
    )


def pick_device(config: SpeechConfig) -> tuple[str, str]:
    """(device, compute type): CUDA when asked, or when "auto" and CTranslate2 sees a GPU; else the CPU."""
    if config.device == "cpu":
        return "cpu", config.compute_type
    import ctranslate2

    if config.device == "cuda" or ctranslate2.get_cuda_device_count() > 0:
        return "cuda", config.cuda_compute_type
    return "cpu", config.compute_type


class Transcriber:
    def __init__(self, config: SpeechConfig, name: str = "speech") -> None:
        self.config = config
        self.name = name
        self.model = config.model
        self._dir = Path(config.model_dir).expanduser()
        self.available = (self._dir / "model.bin").is_file()  # checked once: scripts/setup.sh builds it
        self.device = ""
        self._whisper: Any = None
        self._loading = asyncio.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max(1, config.workers), thread_name_prefix="whisper"
        )
        self._running = 0  # transcriptions on a worker thread or waiting for one
        self._limit = max(1, config.workers) + max(0, config.max_waiting)

    @property
    def names(self) -> frozenset[str]:
        return frozenset({self.model, *self.config.aliases}) if self.available else frozenset()

    @property
    def busy(self) -> int:
        return self._running

    async def start(self) -> None:
        if not self.available:
            log.warning(
                "speech model not found in %s (run scripts/setup.sh); speech to text is off", self._dir
            )
        elif self.config.preload:
            await self.loaded()

    async def loaded(self) -> None:
        """Load the model unless it is loaded (once, beside the event loop; callers meanwhile wait)."""
        if self._whisper is not None:
            return
        async with self._loading:
            if self._whisper is not None:
                return
            if not self.available:
                raise TierUnavailable(self.name, f"no speech model in {self._dir} (run scripts/setup.sh)")
            try:
                self._whisper = await asyncio.to_thread(self._load)
            except Exception as exc:  # a corrupt folder, a CUDA build that cannot start
                raise TierUnavailable(
                    self.name, f"cannot load the speech model from {self._dir}: {exc}"
                ) from exc
        log.info("speech to text ready: %s on %s", self.model, self.device)

    def _load(self) -> Any:
        from faster_whisper import WhisperModel

        device, compute = pick_device(self.config)
        whisper = WhisperModel(
            str(self._dir),
            device=device,
            compute_type=compute,
            cpu_threads=self.config.threads,
            num_workers=max(1, self.config.workers),
            local_files_only=True,
        )
        self.device = f"{device}/{compute}"
        return whisper

    async def segments(
        self, audio: np.ndarray, asked: Asked = Asked()
    ) -> AsyncGenerator[Heard | Segment, None]:
        """A :class:`Heard` first, then each segment as the decoder finishes it. Closing the iterator
        early stops the decoder at its next segment."""
        await self.loaded()
        if self._running >= self._limit:
            raise TierOverloaded(
                self.name,
                f"speech to text is busy ({self._running} transcriptions running or waiting, at most "
                f"{self._limit}: speech.workers + speech.max_waiting); retry after the Retry-After seconds",
                retry_after_s=2.0,
                reason="speech_busy",
            )
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Heard | Segment | BaseException | None] = asyncio.Queue()
        stop = threading.Event()

        def put(item: Heard | Segment | BaseException | None) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def run() -> None:
            try:
                raw, info = self._whisper.transcribe(
                    audio,
                    task=asked.task,
                    language=asked.language or None,
                    initial_prompt=asked.prompt or None,
                    temperature=asked.temperature if asked.temperature > 0 else _FALLBACK,
                    beam_size=self.config.beam_size,
                    word_timestamps=asked.words,
                    vad_filter=False,
                )
                put(Heard(str(info.language), float(info.duration)))
                for segment in raw:
                    if stop.is_set():
                        break
                    put(_segment(segment))
                put(None)
            except BaseException as exc:  # handed to the caller, on the event loop
                put(exc)

        self._running += 1
        job = loop.run_in_executor(self._pool, run)
        # The bound counts a job until its thread is done, even if its caller left early.
        job.add_done_callback(lambda _: self._done())
        try:
            while (item := await queue.get()) is not None:
                if isinstance(item, BaseException):
                    raise TierUnavailable(self.name, f"the transcriber failed: {item}") from item
                yield item
        finally:
            stop.set()

    def _done(self) -> None:
        self._running -= 1

    async def transcribe(self, audio: np.ndarray, asked: Asked = Asked()) -> Transcript:
        """The whole transcript."""
        heard = Heard(asked.language or "", len(audio) / SAMPLE_RATE)
        found: list[Segment] = []
        async for item in self.segments(audio, asked):
            if isinstance(item, Heard):
                heard = item
            else:
                found.append(item)
        text = "".join(s.text for s in found).strip()
        return Transcript(text, heard.language, heard.duration, tuple(found))

    async def aclose(self) -> None:
        await asyncio.to_thread(self._pool.shutdown, True, cancel_futures=True)
        self._whisper = None
