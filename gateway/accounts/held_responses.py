"""Stored responses written ahead: a new row goes to a write-ahead file and into memory at once, and
into the database a moment later, every row held meanwhile in one transaction.

Why: writing a stored response into SQLite before its answer cost ~0.7 ms (SQLAlchemy, the insert and
its commit) plus ~0.15 ms for the hop to a thread and back, on every ``store: true`` request
(``bench.responses_overhead``: 1.9 ms added against Chat Completions, where the goal is 0.2 ms).  An
append to the file is a page-cache write of a few microseconds on the event loop, and it keeps the
promise the ledger's default ``ledger.sync = "os"`` makes for its rows: a response that was answered
survives the process being killed (the next start loads the file into the database); a power cut may
lose the last ones.  With ``ledger.sync = "disk"``, or on PostgreSQL (where other gateways must find a
response as soon as its answer is out), :class:`~gateway.accounts.stored_responses.ResponseStore` writes
through instead.

Reads see a held row at once (only this gateway writes its SQLite file).  A held row leaves memory
only once its transaction committed, and the file's segments go only then, so a failed write is
tried again at the next flush and nothing answered is lost.  Memory is bounded: past
``[responses] max_held_bytes`` (:data:`MAX_HELD_BYTES` by default) a put writes through (it waits
for the database) until a flush catches up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

import msgspec

from gateway.accounts.storage import WriteAheadLog, read_lines
from gateway.ops import background

log = logging.getLogger(__name__)
MAX_HELD_BYTES = 64 << 20


class HeldRow(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the ``responses`` table, as the write-ahead file keeps it."""

    id: str
    tenant: str
    parent: str | None
    created_at: float
    expires_at: float
    size: int  # bytes of body + added
    body: bytes
    added: bytes


Insert = Callable[[list[HeldRow]], None]  # blocking: rows into the table, a row already there skipped
_decode = msgspec.json.Decoder(HeldRow).decode


def read_rows(path: Path) -> list[HeldRow]:
    """A segment's rows; a torn last line (killed mid-append: its answer was never sent) is skipped,
    and so is any other line that is not a row, with a warning (only a damaged disk makes one)."""

    def refused(number: int, _line: bytes, why: str) -> None:
        log.warning("%s, line %d, is not a stored response (skipped): %s", path, number, why)

    return read_lines(path, _decode, refused)


class HeldResponses:
    def __init__(
        self, directory: Path, insert: Insert, *, interval_s: float, max_bytes: int = MAX_HELD_BYTES
    ) -> None:
        self._wal = WriteAheadLog(directory)
        self._max_bytes = max_bytes
        self._insert = insert
        self._interval_s = interval_s
        self._rows: dict[str, HeldRow] = {}
        self._bytes = 0
        self._lock = asyncio.Lock()  # one flush at a time
        self._task: asyncio.Task[None] | None = None
        # The flushes' thread runs at the lowest priority, beside the event loop.
        self._thread = background.background_thread("responses-flush")

    @property
    def full(self) -> bool:
        return self._bytes >= self._max_bytes

    def recover(self) -> int:
        """Blocking, before serving: what a killed run left in the file, into the database."""
        segments = self._wal.rotate()
        rows = [row for path in segments for row in read_rows(path)]
        if rows:
            self._insert(rows)
        for path in segments:
            path.unlink()
        return len(rows)

    def start(self) -> None:
        self._task = asyncio.create_task(self._flush_forever(), name="responses-flush")

    def add(self, row: HeldRow) -> None:
        """On the event loop: in the file (the page cache), then readable here."""
        self._wal.append(msgspec.json.encode(row) + b"\n", sync=False)
        self._rows[row.id] = row
        self._bytes += row.size

    def get(self, tenant: str, response_id: str, now: float) -> HeldRow | None:
        row = self._rows.get(response_id)
        return row if row is not None and row.tenant == tenant and row.expires_at > now else None

    def bytes_of(self, tenant: str) -> int:
        """What the tenant's held rows take (a flush interval's worth of rows at most)."""
        return sum(row.size for row in self._rows.values() if row.tenant == tenant)

    def holds(self, response_id: str) -> bool:
        return response_id in self._rows

    async def flush(self) -> None:
        """Every held row into the database, in one transaction; then their segments go."""
        async with self._lock:
            if not self._rows:
                return
            # No await between the two: every row in the closed segments is in ``rows``, and no other.
            closed = self._wal.rotate()
            rows = list(self._rows.values())
            await asyncio.get_running_loop().run_in_executor(self._thread, self._insert, rows)
            for path in closed:
                path.unlink(missing_ok=True)
            for row in rows:
                if self._rows.get(row.id) is row:
                    del self._rows[row.id]
                    self._bytes -= row.size

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.flush()
            except Exception as exc:  # the database is away: the rows stay held and in the file
                log.warning("stored responses not yet written to the database (kept, retried): %r", exc)

    async def aclose(self) -> None:
        await background.stop(self._task)
        try:
            await self.flush()
        except Exception as exc:  # the file keeps them: the next start loads them
            log.warning("stored responses left in the write-ahead file for the next start: %r", exc)
        self._wal.close()
        self._thread.shutdown(wait=False)
