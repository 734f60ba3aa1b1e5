"""Background work runs at the lowest CPU priority (gateway/ops/background.py)."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import pytest

from gateway.accounts.ledger import Ledger
from gateway.accounts.storage import open_database
from gateway.ops.background import LOWEST, background_thread

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priorities are Linux's")


def _nice_of_this_thread() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@linux
def test_a_background_thread_is_niced_and_the_rest_of_the_process_is_not() -> None:
    before = _nice_of_this_thread()
    executor = background_thread("t")
    try:
        assert executor.submit(_nice_of_this_thread).result() == LOWEST
    finally:
        executor.shutdown()
    assert _nice_of_this_thread() == before  # the caller (the event loop's thread) keeps its priority


@linux
def test_the_ledger_loads_rows_in_a_lowest_priority_thread(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")

    async def main() -> int:
        ledger = Ledger(engine, tmp_path / "wal", sync="os")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(ledger._db_thread, _nice_of_this_thread)
        finally:
            ledger._db_thread.shutdown()
            ledger._wal_thread.shutdown()

    assert asyncio.run(main()) == LOWEST


def _nice_of_this_process() -> int:
    return os.getpriority(os.PRIO_PROCESS, 0)


def test_the_predictor_refit_worker_runs_at_the_lowest_priority() -> None:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from gateway.ops.background import exit_with_parent

    before = _nice_of_this_process()
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        1, mp_context=context, initializer=exit_with_parent, initargs=(os.getpid(),)
    ) as pool:
        assert pool.submit(_nice_of_this_process).result(timeout=60) == LOWEST
    assert _nice_of_this_process() == before  # the gateway's own process is left alone
