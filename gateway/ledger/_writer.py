"""The ledger: durable row writes off the event loop, batched into the database.

:meth:`Ledger.record` queues a row; rows queued while a write is in progress go out together
in the next one (group commit), so under load one fsync covers many requests.  ``durable``
callers wait until their row is on disk: the gateway does so before it sends a 200's last
byte.  A loader task moves closed write-ahead segments into the database every
``flush_interval_s``; start-up first loads what a previous (perhaps killed) run left.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
from sqlalchemy import Engine
from sqlalchemy.dialects import postgresql, sqlite

from gateway.ledger._row import LedgerRow, encode_row
from gateway.ledger._wal import WriteAheadLog, read_segment
from gateway.storage import ledger as ledger_table

log = logging.getLogger(__name__)


def insert_rows(engine: Engine, rows: list[LedgerRow]) -> None:
    """Insert rows, skipping any already there (replay is idempotent)."""
    if not rows:
        return
    insert: Any = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    values = [msgspec.structs.asdict(row) for row in rows]
    with engine.begin() as conn:
        conn.execute(insert(ledger_table).on_conflict_do_nothing(index_elements=["entry_id"]), values)


class Ledger:
    def __init__(self, engine: Engine, wal_dir: Path, *, flush_interval_s: float = 0.5) -> None:
        self._engine = engine
        self._wal = WriteAheadLog(wal_dir)
        self._interval = flush_interval_s
        # One thread appends and rotates (order matters); another talks to the database.
        self._wal_thread = ThreadPoolExecutor(1, thread_name_prefix="ledger-wal")
        self._db_thread = ThreadPoolExecutor(1, thread_name_prefix="ledger-db")
        self._pending: list[bytes] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._writing: asyncio.Task[None] | None = None
        self._loader: asyncio.Task[None] | None = None

    async def start(self) -> int:
        """Load what an earlier run left in the write-ahead file; start the loader. Returns the
        number of rows replayed."""
        loop = asyncio.get_running_loop()
        replayed = await loop.run_in_executor(self._db_thread, self._load_closed_segments)
        if replayed:
            log.info("ledger: replayed %d rows from the write-ahead file", replayed)
        self._loader = asyncio.create_task(self._load_periodically(), name="ledger-loader")
        return replayed

    async def record(self, row: LedgerRow) -> None:
        """Write ``row``; return once it is fsynced to the write-ahead file."""
        waiter = self.submit(row, durable=True)
        assert waiter is not None
        await asyncio.shield(waiter)

    def submit(self, row: LedgerRow, *, durable: bool = False) -> asyncio.Future[None] | None:
        """Queue ``row`` for the next write; with ``durable``, a future done once it is on disk."""
        loop = asyncio.get_running_loop()
        self._pending.append(encode_row(row) + b"\n")
        waiter: asyncio.Future[None] | None = None
        if durable:
            waiter = loop.create_future()
            self._waiters.append(waiter)
        if self._writing is None:
            self._writing = loop.create_task(self._write())
        return waiter

    async def _write(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, waiters = self._pending, self._waiters
                self._pending, self._waiters = [], []
                try:
                    await loop.run_in_executor(self._wal_thread, self._wal.append, b"".join(batch))
                except Exception as exc:
                    log.exception("ledger: write-ahead append failed")
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(exc)
                    continue
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
        finally:
            self._writing = None

    async def _load_periodically(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush(loop)
            except Exception:
                log.exception("ledger: moving rows into the database failed; will retry")

    async def flush(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Move every row written so far into the database."""
        loop = loop or asyncio.get_running_loop()
        closed = await loop.run_in_executor(self._wal_thread, self._wal.rotate)
        if closed:
            await loop.run_in_executor(self._db_thread, self._load, closed)

    def _load_closed_segments(self) -> int:
        return self._load(self._wal.rotate())

    def _load(self, segments: list[Path]) -> int:
        count = 0
        for path in segments:
            rows = read_segment(path)
            insert_rows(self._engine, rows)
            path.unlink()
            count += len(rows)
        return count

    async def aclose(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
        if self._writing is not None:
            with contextlib.suppress(Exception):
                await self._writing
        try:
            await self.flush()
        except Exception:
            log.exception("ledger: rows stay in the write-ahead file until the next start")
        self._wal.close()
        self._wal_thread.shutdown()
        self._db_thread.shutdown()
