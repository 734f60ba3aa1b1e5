"""Inputs from every request waiting for the model, run as few padded ONNX calls as they allow.

One asyncio task drains what is waiting, sorts it by length (so a call pads little), cuts it into calls
of at most ``max_batch`` rows and ``max_batch_tokens`` padded tokens and runs each on one worker thread,
off the event loop (ONNX Runtime releases the GIL while it computes).  What arrives meanwhile waits for
the next round and joins the same calls.  At most ``max_queue`` inputs wait: past that, 429 at once.

A request that finds the model idle and nothing waiting, and fits one call, skips the queue: its
caller hands the call to the worker thread itself (one hop less than waking the batching task, which
matters for one text at a time); whatever arrives meanwhile waits and goes out together after it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from tiers._errors import TierOverloaded

Rows = Sequence[Sequence[int]]
Vectors = npt.NDArray[np.float32]
Run = Callable[[Rows], Vectors]
Observe = Callable[[int, int], None]  # rows and padded width of one call


def plan_calls(lengths: Sequence[int], max_batch: int, max_tokens: int) -> list[list[int]]:
    """Indexes of the rows in each call: shortest first, a call ends at max_batch rows or when its
    padded size (rows × its longest row) would pass max_tokens."""
    calls: list[list[int]] = []
    current: list[int] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if current and (len(current) >= max_batch or (len(current) + 1) * lengths[i] > max_tokens):
            calls.append(current)
            current = []
        current.append(i)
    if current:
        calls.append(current)
    return calls


class Batcher:
    def __init__(
        self,
        run: Run,
        dimensions: int,
        *,
        name: str,
        max_batch: int,
        max_batch_tokens: int,
        max_queue: int,
        observe: Observe = lambda rows, width: None,
    ) -> None:
        self._run = run
        self._dims = dimensions
        self._name = name
        self._max_batch = max_batch
        self._max_tokens = max_batch_tokens
        self._max_queue = max_queue
        self._observe = observe
        self._pending: list[tuple[Rows, asyncio.Future[Vectors]]] = []
        self._queued = 0
        self._busy = False  # a call is on the worker thread (those waiting go out after it)
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{name}-onnx")
        self._task: asyncio.Task[None] | None = None

    @property
    def queued(self) -> int:
        return self._queued

    def start(self) -> None:
        self._task = asyncio.create_task(self._serve(), name=f"{self._name}-batcher")

    async def embed(self, rows: Rows) -> Vectors:
        """One vector per row (token ids), in order."""
        if self._task is None:
            raise RuntimeError("the batcher is not started")
        if self._queued and self._queued + len(rows) > self._max_queue:
            raise TierOverloaded(
                self._name,
                f"{self._queued} inputs are waiting for the embedding model (at most {self._max_queue})",
                reason="embedding_queue",
            )
        if not self._busy and not self._pending and self._fits(rows):
            return await self._direct(rows)
        future: asyncio.Future[Vectors] = asyncio.get_running_loop().create_future()
        self._pending.append((rows, future))
        self._queued += len(rows)
        if not self._busy:
            self._wake.set()
        return await future

    def _fits(self, rows: Rows) -> bool:
        return len(rows) <= self._max_batch and len(rows) * max(map(len, rows)) <= self._max_tokens

    async def _direct(self, rows: Rows) -> Vectors:
        """One call for this caller alone, run from its own task."""
        self._busy = True
        self._queued += len(rows)
        try:
            out = await asyncio.get_running_loop().run_in_executor(self._executor, self._run, rows)
            self._observe(len(rows), max(map(len, rows)))
            return out
        finally:
            self._busy = False
            self._queued -= len(rows)
            if self._pending:
                self._wake.set()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._busy or not self._pending:  # a direct call runs: it wakes this task again after
                continue
            self._busy = True
            jobs, self._pending = self._pending, []
            waited = sum(len(rows) for rows, _ in jobs)
            jobs = [(rows, f) for rows, f in jobs if not f.done()]  # callers that left
            flat = [row for rows, _ in jobs for row in rows]
            try:
                out = np.empty((len(flat), self._dims), dtype=np.float32)
                for call in plan_calls([len(r) for r in flat], self._max_batch, self._max_tokens):
                    batch = [flat[i] for i in call]
                    out[call] = await loop.run_in_executor(self._executor, self._run, batch)
                    self._observe(len(batch), max(map(len, batch)))
            except Exception as exc:  # the engine failed: every waiting caller hears it
                for _, future in jobs:
                    if not future.done():
                        future.set_exception(exc)
            else:
                start = 0
                for rows, future in jobs:
                    if not future.done():
                        future.set_result(out[start : start + len(rows)])
                    start += len(rows)
            finally:
                self._queued -= waited
                self._busy = False
                if self._pending:  # arrived during these calls: the next round
                    self._wake.set()

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for _, future in self._pending:
            if not future.done():
                future.cancel()
        self._executor.shutdown(wait=False)
