"""What every in-process edge engine shares: one model, one worker thread, a bounded FIFO queue.

In-process engines (llama.cpp, ONNX Runtime) are not safe to call from several threads per model, so
each tier runs every call on one dedicated worker thread; requests wait their turn in FIFO order
(``asyncio.Lock`` is fair), a bounded number of them (beyond it: :class:`TierOverloaded`), and text pieces
cross back to the event loop with ``call_soon_threadsafe`` as the engine makes them.  Closing a stream
early (``aclose``) sets a flag the worker checks before each token, so the engine stops at the next one.

A backend subclasses :class:`SerialEngineTier` and writes two methods that run on the worker thread:
``_load`` and ``_generate_into`` (which emits the answer's events, then one :class:`Finished`; both
backends run :mod:`tiers.edge._decode`'s loop for it);
:meth:`SerialEngineTier.generate` puts :class:`Started` before them once the first one is there.
``start`` loads the model and generates one token to warm it.  Several of these make one model
version's instances (:mod:`tiers.edge._instances`), each named in its answers.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tiers._cpus import pin_this_thread
from tiers._errors import TierError, TierOverloaded, TierUnavailable
from tiers._events import Event, Finished, Started, TextDelta
from tiers._types import Capabilities, Generation, Health, Modality, TierState
from tiers.edge._config import EdgeConfig
from tiers.edge._decode import Emit
from tiers.edge._grammar import edge_abilities
from tiers.edge._prefix import PrefixStore

log = logging.getLogger(__name__)

# The timed warm-up answer's length: 16 tokens take ~0.6 s on two busy CPU cores, ~25 ms on an H200.
TIMED_TOKENS = 16


def timed_request() -> Generation:
    """A request whose greedy answer runs past :data:`TIMED_TOKENS` (an essay is never that short)."""
    ask = [{"role": "user", "content": "Write a long essay about the history of Rome."}]
    return Generation(messages=ask, max_tokens=TIMED_TOKENS, temperature=0)


def speed_of(started: float, seen: list[tuple[float, object]]) -> tuple[float, float]:
    """(tokens/s after the first, seconds to the first text) from a timed answer's events; (0, 0) when
    it made fewer than two tokens or failed (the router keeps its generic prior)."""
    texts = [t for t, item in seen if isinstance(item, TextDelta)]
    done = [(t, item) for t, item in seen if isinstance(item, Finished)]
    if not texts or not done:
        return 0.0, 0.0
    end, finished = done[-1]
    tokens = finished.usage.completion_tokens
    if tokens < 2 or end <= texts[0]:
        return 0.0, texts[0] - started
    return (tokens - 1) / (end - texts[0]), texts[0] - started


__all__ = ["Emit", "SerialEngineTier"]


class SerialEngineTier:
    """A :class:`~tiers.Tier` over an engine that runs one generation at a time on its own thread."""

    name = "edge"
    thread_name = "edge"

    def __init__(self, config: EdgeConfig, instance: str = "") -> None:
        self._config = config
        # Named in answers (X-Tiergate-Instance): which engine instance of which model served them.
        self.instance = instance or config.model_name
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=self.thread_name,
            initializer=pin_this_thread,  # the engine's own threads, started from it, inherit its CPUs
            initargs=(config.cpus,),
        )
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._health = Health.STARTING
        self._detail = "loading model"
        # Where the engine runs, set by the backend at load: "cpu", or "cuda:0 (NVIDIA H200)".
        self.device = "cpu"
        self.speed = (0.0, 0.0)  # (tokens/s, first token s) of one request alone, timed at load
        # Saved prompt states, for backends that reuse a prompt's prefix (each stores its own kind).
        self.prefixes: PrefixStore[Any] = PrefixStore(config.prefix_cache_mb << 20)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            modalities=frozenset({Modality.TEXT}),
            max_context_tokens=self._config.context_tokens,
            model=self._config.model_name,
            quality=self._config.quality,
            abilities=edge_abilities(),
        )

    @property
    def slots(self) -> int:
        """Requests it runs at once (one; a batching engine more)."""
        return 1

    @property
    def load(self) -> int:
        """Requests running or waiting on this instance."""
        return int(self._lock.locked()) + self._waiting

    @property
    def health(self) -> Health:
        return self._health

    def state(self) -> TierState:
        return TierState(
            self.name,
            self._health,
            in_flight=int(self._lock.locked()),
            queued=self._waiting,
            detail=self._detail,
            device=self.device,
            tokens_per_s=self.speed[0],
            first_token_s=self.speed[1],
        )

    async def start(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._load_and_warm)
        except Exception as exc:  # a missing or broken model leaves the tier down, not the gateway
            self._health, self._detail = Health.DOWN, f"cannot load model: {exc}"
            log.error("edge tier %s", self._detail)
            return
        self._health, self._detail = Health.READY, f"{self._config.model_name} loaded ({self.describe()})"
        log.info("edge instance %s runs on %s: %s", self.instance, self.device, self._detail)

    async def aclose(self) -> None:
        self._health, self._detail = Health.DOWN, "closed"

        # Waits for the worker's last step: off the event loop, since a hot swap closes a version while
        # the gateway serves.
        def close() -> None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._unload()
            self.prefixes.clear()

        await asyncio.to_thread(close)

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        if self._health is not Health.READY:
            raise TierUnavailable(self.name, self._detail)
        if self._waiting >= self._config.max_queue:
            raise TierOverloaded(self.name, f"{self._waiting} requests are waiting for the edge model")
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        queue, emit = self._channel()
        cancel = threading.Event()
        try:
            job = asyncio.get_running_loop().run_in_executor(
                self._executor, self._generate, gen, emit, cancel
            )
        except BaseException:
            self._lock.release()
            raise
        job.add_done_callback(lambda _: self._lock.release())
        try:
            async for event in self._relay(queue):
                yield event
        finally:
            cancel.set()  # the worker stops at its next token; the lock is freed when it has

    @staticmethod
    def _channel() -> tuple[asyncio.Queue[Event | BaseException], Emit]:
        """A queue on the event loop, and the worker thread's function that puts into it."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Event | BaseException] = asyncio.Queue()

        def emit(item: Event | BaseException) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        return queue, emit

    async def _relay(self, queue: asyncio.Queue[Event | BaseException]) -> AsyncGenerator[Event, None]:
        """The worker's events: :class:`Started` once the first is there, then each to :class:`Finished`;
        an error raised (before the first event: nothing was produced)."""
        item = await queue.get()
        if isinstance(item, BaseException):
            raise item
        yield Started(self.instance, self._config.model_name)
        while True:
            yield item
            if isinstance(item, Finished):
                return
            item = await queue.get()
            if isinstance(item, BaseException):
                raise item

    # -- for backends -----------------------------------------------------------

    def describe(self) -> str:
        """A few words on how the engine runs (threads, providers), for the readiness detail."""
        return ""

    def _unload(self) -> None:
        """Drop the engine's objects after the worker has stopped."""

    def _load_and_warm(self) -> None:  # on the worker thread
        self._load()
        # one token through the engine: pages the weights in and allocates, so the first client does not
        warm = Generation(messages=[{"role": "user", "content": "Hello"}], max_tokens=1, temperature=0)
        self._generate_into(warm, lambda item: None, threading.Event())
        # then a short answer, timed: the router's latency prior for this engine on this hardware
        seen: list[tuple[float, object]] = []
        started = time.perf_counter()
        self._generate_into(
            timed_request(), lambda item: seen.append((time.perf_counter(), item)), threading.Event()
        )
        self.speed = speed_of(started, seen)
        self.prefixes.hits = 0  # the timed answer may reuse the first's prompt: no client's restore

    def _load(self) -> None:  # on the worker thread
        raise NotImplementedError

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        """Run one generation on the worker thread: emit :class:`TextDelta` pieces, then one
        :class:`Finished`; return early without it when ``cancel`` is set."""
        raise NotImplementedError

    def _generate(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        try:
            self._generate_into(gen, emit, cancel)
        except TierError as exc:
            emit(exc)
        except Exception as exc:
            log.exception("edge generation failed")
            emit(TierUnavailable(self.name, f"generation failed: {exc}"))
