"""Decoding off the event loop: a pool of worker processes, each task bounded in time.

A task runs under an interval timer inside its worker (a decoder that loops is stopped there and
its medium refused as corrupt); if a worker still does not answer a little after the deadline,
or dies (a decoder crash), the pool is replaced, so the gateway never waits on a broken worker.
At most one task per worker is handed to the pool at a time (the rest wait here), so a task's
deadline counts its own decoding, not the queue ahead of it; a new pool's first tasks also get
the workers' start-up time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
from collections.abc import Callable
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from gateway.media._failure import CORRUPT, MediaFailure

log = logging.getLogger(__name__)

T = TypeVar("T")
# Time a worker gets beyond its own timer before the pool is replaced; more while a new pool starts.
_GRACE_S = 2.0
_STARTUP_GRACE_S = 60.0
_PR_SET_PDEATHSIG = 1


def _on_alarm(_signum: int, _frame: Any) -> None:
    raise MediaFailure(CORRUPT, "decoding took longer than the configured time (media.timeout_s)")


def _bounded(fn: Callable[..., T], timeout_s: float, *args: Any) -> T:
    """Runs in the worker: ``fn(*args)`` under SIGALRM after ``timeout_s``."""
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _worker_init(gateway_pid: int) -> None:
    # Die with the gateway, even if it is killed with SIGKILL (the kernel sends us SIGKILL then).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != gateway_pid:  # it died while this worker was starting: no signal will come
        os._exit(0)
    _warm()


def _warm() -> None:  # import the decoders once per worker, not on the first request
    import av  # noqa: F401
    import PIL.Image  # noqa: F401


class DecodePool:
    def __init__(self, workers: int) -> None:
        self._workers = max(1, workers)
        self._pool: concurrent.futures.ProcessPoolExecutor | None = None
        self._slots = asyncio.Semaphore(self._workers)
        self._started = False  # the current pool has answered once (its workers are up)

    async def start(self) -> None:
        """Start the workers now rather than on the first medium, without waiting for them: importing
        the decoders takes seconds of CPU, and text requests need none of it. A medium that comes
        before they are up waits with the start-up grace."""
        pool = self._executor()

        def warmed(done: concurrent.futures.Future[None]) -> None:
            if done.cancelled() or self._pool is not pool:
                return
            if (exc := done.exception()) is not None:
                log.warning("media decode workers did not start: %s", exc)
            else:
                self._started = True

        pool.submit(_warm).add_done_callback(warmed)

    def _executor(self) -> concurrent.futures.ProcessPoolExecutor:
        if self._pool is None:
            # spawn: the gateway has threads (llama.cpp, aiohttp's resolver); forking them is unsafe.
            self._pool = concurrent.futures.ProcessPoolExecutor(
                self._workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_worker_init,
                initargs=(os.getpid(),),
            )
        return self._pool

    def _replace(self, why: str) -> None:
        pool, self._pool = self._pool, None
        self._started = False
        if pool is None:
            return
        log.warning("media decode pool replaced: %s", why)
        # The stuck or crashed workers are killed; private, but the only handle on them.
        for process in list(getattr(pool, "_processes", {}).values()):
            process.kill()
        pool.shutdown(wait=False, cancel_futures=True)

    async def run(self, fn: Callable[..., T], timeout_s: float, *args: Any) -> T:
        async with self._slots:
            return await self._run(fn, timeout_s, *args)

    async def _run(self, fn: Callable[..., T], timeout_s: float, *args: Any) -> T:
        pool = self._executor()
        deadline = timeout_s + (_GRACE_S if self._started else _STARTUP_GRACE_S)
        future = asyncio.get_running_loop().run_in_executor(pool, _bounded, fn, timeout_s, *args)
        try:
            result = await asyncio.wait_for(future, deadline)
            if self._pool is pool:
                self._started = True
            return result
        except MediaFailure:
            if self._pool is pool:
                self._started = True
            raise
        except TimeoutError as exc:
            if self._pool is pool:
                self._replace(f"a worker did not answer within {deadline:.0f} s")
            raise MediaFailure(CORRUPT, "decoding took longer than the configured time") from exc
        except BrokenProcessPool as exc:
            if self._pool is pool:
                self._replace("a worker died")
            raise MediaFailure(CORRUPT, "the decoder failed on this medium (its worker crashed)") from exc

    def close(self) -> None:
        """Stop the workers (blocks up to a few seconds; call it from a thread on the event loop)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(5)
