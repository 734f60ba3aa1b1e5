"""Periodic background work runs at the lowest CPU priority, so that it never delays a request.

The ledger's loads into the database, the policy and budget reads and the predictor's refits
are work no request waits for.  At normal priority, a thread (or child process) that is ready
to run shares the core with the event loop in the kernel's time slices (milliseconds), and a
request that arrives meanwhile waits for the slice to end: on a gateway pinned to one core
these were the periodic 3-10 ms stalls behind the p99 (bench/overhead.py).  At nice 19 the
kernel runs the event loop first whenever it has work, and the background work fills the idle
time between requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

LOWEST = 19


def lower_priority(whole_process: bool = False) -> None:
    """Nice this thread (Linux schedules each thread on its own) or, with ``whole_process``, this
    process; a platform that cannot is left as it is."""
    target = 0 if whole_process else threading.get_native_id()
    if not whole_process and not sys.platform.startswith("linux"):
        return  # elsewhere a thread's priority is its process's: leave the process alone
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, target, LOWEST)


def background_thread(name: str) -> ThreadPoolExecutor:
    """One thread at the lowest priority, for periodic work no request waits for."""
    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=lower_priority)


async def stop(task: asyncio.Task[Any] | None) -> None:
    """Cancel a periodic task (if it was started) and wait until it has ended."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def exit_with_parent(parent: int) -> None:
    """In the refit worker: run at the lowest priority (a refit never delays a request), and exit
    as soon as the gateway is gone, even if it was killed."""
    lower_priority(whole_process=True)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
