"""What every in-process edge engine shares: one model, one worker thread, a bounded FIFO queue.

In-process engines (llama.cpp, ONNX Runtime) are not safe to call from several threads per model, so
each tier runs every call on one dedicated worker thread; requests wait their turn in FIFO order
(``asyncio.Lock`` is fair), a bounded number of them (beyond it: :class:`TierOverloaded`), and text pieces
cross back to the event loop with ``call_soon_threadsafe`` as the engine makes them.  Closing a stream
early sets a flag the worker checks before each token, so the engine stops at the next one.

A backend subclasses :class:`SerialEngineTier` and writes two methods that run on the worker thread:
``_load`` and ``_generate_into``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

from tiers._errors import TierError, TierOverloaded, TierUnavailable
from tiers._types import Capabilities, Completion, Delta, Generation, Health, Modality, TierState, Usage
from tiers.edge._config import EdgeConfig

log = logging.getLogger(__name__)

# SmolLM2's model card recommends a low temperature; used when the client sets none.
DEFAULT_TEMPERATURE = 0.2
DEFAULT_TOP_P = 0.9

Emit = Callable[[Delta | BaseException], None]


def default_threads() -> int:
    """One core fewer than the machine has (at least one).

    llama.cpp's threads (and onnxruntime's intra-op pool) spin while they wait for each other; when one
    of them shares a core with the event loop or a vLLM server, a generation can slow down tenfold or
    more (measured here: 1.3 tok/s with 2 threads on 2 busy cores, 15 tok/s with 1).
    """
    return max(1, (os.cpu_count() or 1) - 1)


class SerialEngineTier:
    """A :class:`~tiers.Tier` over an engine that runs one generation at a time on its own thread."""

    name = "edge"
    thread_name = "edge"

    def __init__(self, config: EdgeConfig) -> None:
        self._config = config
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.thread_name)
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._health = Health.STARTING
        self._detail = "loading model"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            modalities=frozenset({Modality.TEXT}),
            max_context_tokens=self._config.context_tokens,
            model=self._config.model_name,
            quality=self._config.quality,
        )

    def state(self) -> TierState:
        return TierState(
            self.name,
            self._health,
            in_flight=int(self._lock.locked()),
            queued=self._waiting,
            detail=self._detail,
        )

    async def start(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._load)
        except Exception as exc:  # a missing or broken model leaves the tier down, not the gateway
            self._health, self._detail = Health.DOWN, f"cannot load model: {exc}"
            log.error("edge tier %s", self._detail)
            return
        self._health, self._detail = Health.READY, f"{self._config.model_name} loaded ({self.describe()})"

    async def aclose(self) -> None:
        self._health, self._detail = Health.DOWN, "closed"
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._unload()

    async def complete(self, gen: Generation) -> Completion:
        parts: list[str] = []
        final = Delta(finish_reason="stop", usage=Usage(0, 0))
        async for delta in self.stream(gen):
            parts.append(delta.text)
            final = delta
        assert final.usage is not None
        return Completion("".join(parts), final.finish_reason or "stop", final.usage, self._config.model_name)

    async def stream(self, gen: Generation) -> AsyncIterator[Delta]:
        if self._health is not Health.READY:
            raise TierUnavailable(self.name, self._detail)
        if self._waiting >= self._config.max_queue:
            raise TierOverloaded(self.name, f"{self._waiting} requests are waiting for the edge model")
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Delta | BaseException] = asyncio.Queue()
        cancel = threading.Event()

        def emit(item: Delta | BaseException) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        try:
            job = loop.run_in_executor(self._executor, self._generate, gen, emit, cancel)
        except BaseException:
            self._lock.release()
            raise
        job.add_done_callback(lambda _: self._lock.release())
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            cancel.set()  # the worker stops at its next token; the lock is freed when it has

    # -- for backends -----------------------------------------------------------

    def describe(self) -> str:
        """A few words on how the engine runs (threads, providers), for the readiness detail."""
        return ""

    def _unload(self) -> None:
        """Drop the engine's objects after the worker has stopped."""

    def _load(self) -> None:  # on the worker thread
        raise NotImplementedError

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        """Run one generation on the worker thread: emit text deltas, then one with finish_reason and
        usage; return early without a final delta when ``cancel`` is set."""
        raise NotImplementedError

    def _generate(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        try:
            self._generate_into(gen, emit, cancel)
        except TierError as exc:
            emit(exc)
        except Exception as exc:
            log.exception("edge generation failed")
            emit(TierUnavailable(self.name, f"generation failed: {exc}"))
