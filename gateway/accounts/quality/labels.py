"""Answers' quality labels in the database, beside the ledger: one row per labelled answer, keyed by
the request id its ledger row carries (``answer_labels``), so a cost or quality report can join them.

Labels are written in the background, in batches, off the event loop (:meth:`LabelStore.add` only
appends); the router has learned from a label before its row is written, and a row lost in a crash
costs the record of one label, never an answer or a ledger row.  :meth:`LabelStore.aclose` writes what
is pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from sqlalchemy import Engine, insert

from gateway.accounts.storage import answer_labels

log = logging.getLogger(__name__)
BATCH_AFTER_S = 0.2  # a batch gathers this long after its first label


class LabelStore:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._pending: list[dict[str, Any]] = []
        self._writing: asyncio.Task[None] | None = None

    def add(self, row: dict[str, Any]) -> None:
        """A label to write (the columns of ``answer_labels``); written within :data:`BATCH_AFTER_S`."""
        self._pending.append(row)
        if self._writing is None or self._writing.done():
            with contextlib.suppress(RuntimeError):  # no loop: written at close
                self._writing = asyncio.get_running_loop().create_task(self._write_soon())

    async def _write_soon(self) -> None:
        await asyncio.sleep(BATCH_AFTER_S)
        await self.flush()

    async def flush(self) -> None:
        rows, self._pending = self._pending, []
        if rows:
            try:
                await asyncio.to_thread(self._insert, rows)
            except Exception:
                log.exception("labels: writing %d answer labels failed", len(rows))

    def _insert(self, rows: list[dict[str, Any]]) -> None:
        with self._engine.begin() as conn:
            conn.execute(insert(answer_labels), rows)

    async def aclose(self) -> None:
        if self._writing is not None:
            self._writing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writing
        await self.flush()
