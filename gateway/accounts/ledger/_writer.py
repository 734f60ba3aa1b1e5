"""The ledger: durable row writes off the event loop, batched into the database.

:meth:`Ledger.record` queues a row; rows queued in one turn of the event loop go out as
one write (group commit), so under load one fsync covers many requests.  Callers of
``record`` wait until their row is on disk: the gateway does so before it sends a 200's
last byte.  The write and its fsync happen in a small writer process
(:mod:`gateway.accounts.ledger._procwriter`), or in a thread when that is off or has died.  A
loader task moves closed write-ahead segments into the database every
``flush_interval_s``; start-up first loads what a previous (perhaps killed) run left.
Rows are made to fit their columns as they are recorded, and a row the database still refuses
is set aside with its reason (:mod:`gateway.accounts.ledger._quarantine`): a bad row never stops
the rest of its segment, later segments or a start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
from sqlalchemy import Engine

from gateway.accounts.ledger._procwriter import ProcessWriter, Waiters
from gateway.accounts.ledger._quarantine import QuarantineLog, fit_row, load_rows
from gateway.accounts.ledger._row import LedgerRow, encode_row
from gateway.accounts.ledger._tags import decode_tags
from gateway.accounts.ledger._wal import WriteAheadLog, read_segment, segment_number
from gateway.accounts.storage import ledger as ledger_table
from gateway.accounts.storage import ledger_tags
from gateway.ops.background import background_thread

log = logging.getLogger(__name__)

_COLUMNS = LedgerRow.__struct_fields__
_TAG_COLUMNS = ("entry_id", "key", "value", "tenant_id", "ts")
_MARKS = {"qmark": "?", "format": "%s", "pyformat": "%s"}


def insert_rows(engine: Engine, rows: list[LedgerRow]) -> None:
    """Insert rows, skipping any already there (replay is idempotent).

    One driver-level executemany (SQLite and PostgreSQL both know ``ON CONFLICT DO
    NOTHING``): about 2x less CPU per row than SQLAlchemy's insert construct, and this
    runs beside the event loop.
    """
    if not rows:
        return
    mark = _MARKS[engine.dialect.paramstyle]
    statement = (
        f"INSERT INTO {ledger_table.name} ({', '.join(_COLUMNS)}) "
        f"VALUES ({', '.join([mark] * len(_COLUMNS))}) ON CONFLICT (entry_id) DO NOTHING"
    )
    # A tagged row's tags go in the same transaction (a tags value that is not JSON is refused
    # like any bad value: the row is set aside, the rest go in).
    tags = [
        (r.entry_id, k, v, r.tenant_id, r.ts) for r in rows if r.tags for k, v in decode_tags(r.tags).items()
    ]
    with engine.begin() as conn:
        conn.exec_driver_sql(statement, [msgspec.structs.astuple(row) for row in rows])
        if tags:
            conn.exec_driver_sql(
                f"INSERT INTO {ledger_tags.name} ({', '.join(_TAG_COLUMNS)}) "
                f"VALUES ({', '.join([mark] * len(_TAG_COLUMNS))}) ON CONFLICT (entry_id, key) DO NOTHING",
                tags,
            )


class Ledger:
    def __init__(
        self,
        engine: Engine,
        wal_dir: Path,
        *,
        flush_interval_s: float = 0.5,
        writer_process: bool = True,
        sync: str = "disk",
        on_quarantine: Callable[[int], None] | None = None,
    ) -> None:
        """``on_quarantine(n)`` is told of rows set aside (from the loader's thread)."""
        self._sync = sync
        self._engine = engine
        self._dir = wal_dir
        self._interval = flush_interval_s
        self._use_process = writer_process
        self._process: ProcessWriter | None = None
        self._wal: WriteAheadLog | None = None
        # The in-process fallback: one thread appends and rotates (order matters).
        self._wal_thread = ThreadPoolExecutor(1, thread_name_prefix="ledger-wal")
        self._db_thread = background_thread("ledger-db")
        self._pending: list[bytes] = []
        self._waiters: Waiters = []
        self._scheduled = False
        self._writes: set[asyncio.Task[None]] = set()
        self._loader: asyncio.Task[None] | None = None
        # Rows written since start and rows moved into the database since: their difference is the backlog.
        self._submitted = 0
        self._loaded = 0
        self._quarantine = QuarantineLog(wal_dir, on_quarantine)

    @property
    def quarantined(self) -> int:
        """Rows the database refused since start, set aside in ``<wal_dir>/quarantine.jsonl``."""
        return self._quarantine.count

    @property
    def backlog(self) -> int:
        """Rows written ahead (or queued to be) and not yet in the database."""
        return max(0, self._submitted - self._loaded)

    async def start(self) -> int:
        """Load what an earlier run left in the write-ahead file, start the writer and the
        loader. Returns the number of rows replayed."""
        loop = asyncio.get_running_loop()
        wal = WriteAheadLog(self._dir)
        try:
            replayed = await loop.run_in_executor(self._db_thread, self._load, wal.segments())
        except Exception:  # the database is away, say: the loader retries; the start goes on
            log.exception("ledger: replaying the write-ahead file failed; the loader will retry")
            replayed = 0
        if replayed:
            log.info("ledger: replayed %d rows from the write-ahead file", replayed)
        if self._use_process and self._sync == "disk":
            self._process = ProcessWriter(self._dir, wal.next_number, self._writer_lost, self._sync)
            self._process.start()
        else:
            self._wal = wal
        self._loader = asyncio.create_task(self._load_periodically(), name="ledger-loader")
        return replayed

    async def record(self, row: LedgerRow) -> None:
        """Write ``row``; return once it is on disk (in the write-ahead file)."""
        waiter = self.submit(row, durable=True)
        assert waiter is not None
        await waiter

    def submit(self, row: LedgerRow, *, durable: bool = False) -> asyncio.Future[None] | None:
        """Queue ``row`` for this loop turn's write; with ``durable``, a future done once it is
        on disk."""
        loop = asyncio.get_running_loop()
        self._submitted += 1
        row = fit_row(row)
        if self._sync == "os" and self._wal is not None:
            return self._append_now(encode_row(row) + b"\n", loop, durable)
        self._pending.append(encode_row(row) + b"\n")
        waiter: asyncio.Future[None] | None = None
        if durable:
            waiter = loop.create_future()
            self._waiters.append(waiter)
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._write_pending)
        return waiter

    def _append_now(
        self, line: bytes, loop: asyncio.AbstractEventLoop, durable: bool
    ) -> asyncio.Future[None] | None:
        assert self._wal is not None
        error: OSError | None = None
        try:
            self._wal.append(line, sync=False)
        except OSError as exc:  # the disk is full, say: the request must not pass as recorded
            log.error("ledger: write-ahead append failed: %s", exc)
            error = exc
        if not durable:  # nobody waits for it: the error is logged above
            return None
        done = loop.create_future()
        done.set_exception(error) if error is not None else done.set_result(None)
        return done

    def _write_pending(self) -> None:
        self._scheduled = False
        if not self._pending:
            return
        rows, waiters = b"".join(self._pending), self._waiters
        self._pending, self._waiters = [], []
        if self._process is not None and self._process.alive:
            self._process.append(rows, waiters)
        else:
            self._write_in_thread(rows, waiters)

    def _write_in_thread(self, rows: bytes, waiters: Waiters) -> None:
        task = asyncio.get_running_loop().create_task(self._thread_write(rows, waiters))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def _writer_lost(self, unacked: list[tuple[bytes, Waiters]]) -> None:
        self._wal = WriteAheadLog(self._dir)
        for rows, waiters in unacked:  # written twice at worst: loading skips known rows
            self._write_in_thread(rows, waiters)

    async def _thread_write(self, rows: bytes, waiters: Waiters) -> None:
        assert self._wal is not None
        try:
            await asyncio.get_running_loop().run_in_executor(self._wal_thread, self._wal.append, rows)
        except Exception as exc:
            log.exception("ledger: write-ahead append failed")
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def _load_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.flush()
            except Exception:
                log.exception("ledger: moving rows into the database failed; will retry")

    async def flush(self) -> None:
        """Move every row written so far into the database."""
        loop = asyncio.get_running_loop()
        if self._process is not None and self._process.alive:
            newest = await self._process.rotate()
            closed = [p for p in WriteAheadLog(self._dir).segments() if segment_number(p) <= newest]
        elif self._sync == "os":
            assert self._wal is not None
            closed = self._wal.rotate()  # appends happen on this loop, so rotation does too
        else:
            assert self._wal is not None
            closed = await loop.run_in_executor(self._wal_thread, self._wal.rotate)
        if closed:
            self._loaded += await loop.run_in_executor(self._db_thread, self._load, closed)

    def _load(self, segments: list[Path]) -> int:
        count = 0
        for path in segments:
            bad: list[tuple[bytes, str]] = []
            try:
                rows = read_segment(path, bad)
            except FileNotFoundError:  # loaded already by a flush that was cancelled while it ran
                continue
            except OSError:
                log.exception("ledger: cannot read %s; it stays for the next try", path)
                continue
            inserted, refused = load_rows(lambda batch: insert_rows(self._engine, batch), rows)
            self._quarantine.add(path.name, bad + refused)
            path.unlink(missing_ok=True)
            count += inserted + len(refused)
        return count

    async def aclose(self) -> None:
        if self._loader is not None:
            self._loader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loader
        self._write_pending()
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        try:
            await self.flush()
        except Exception:
            log.exception("ledger: rows stay in the write-ahead file until the next start")
        if self._process is not None:
            await self._process.aclose()
        if self._wal is not None:
            self._wal.close()
        self._wal_thread.shutdown()
        self._db_thread.shutdown()
