"""Rows the database refuses: made to fit before they are written, set aside if still refused.

:func:`fit_row` bounds a row's strings as it is recorded: NUL characters (PostgreSQL's text types
cannot hold them) become U+FFFD and a string over its column's width is cut to it, so a request for
a model named ``"a\\u0000"`` or a megabyte long is recorded, not a row that can never be inserted.

:func:`load_rows` inserts a segment's rows; when the database refuses the batch for what is in it (a
data or integrity error, not a lost connection), the batch is split in halves until each refused row
stands alone. Each refused row is appended to ``quarantine.jsonl`` beside the segments (fsynced,
with the database's reason) and counted; the rest of the segment loads, and the segment is deleted
as usual. So one bad row (written by an older version, or edited by hand) never wedges the ledger:
later segments load, budgets keep moving, and a start never fails on it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

import msgspec
from sqlalchemy import String
from sqlalchemy.exc import DataError, IntegrityError

from gateway.accounts.ledger._row import LedgerRow, encode_row
from gateway.accounts.storage import ledger as ledger_table

log = logging.getLogger(__name__)

QUARANTINE_FILE = "quarantine.jsonl"
# What the database (or its driver, converting a value: SQLite's OverflowError) says of a row's data.
_REFUSED = (DataError, IntegrityError, OverflowError, ValueError)
_STRINGS = tuple(f.name for f in msgspec.structs.fields(LedgerRow) if f.type in (str, str | None))
_WIDTHS = MappingProxyType(
    {
        column.name: column.type.length
        for column in ledger_table.columns
        if isinstance(column.type, String) and column.type.length is not None
    }
)
_REASON_CHARS = 1000


def fit_row(row: LedgerRow) -> LedgerRow:
    """``row`` with NULs replaced and strings cut to their columns' widths (``row`` itself when it fits)."""
    changes: dict[str, str] = {}
    for name in _STRINGS:
        value = getattr(row, name)
        if value is None:
            continue
        fitted = value.replace("\x00", "\ufffd") if "\x00" in value else value
        width = _WIDTHS.get(name)
        if width is not None and len(fitted) > width:
            fitted = fitted[: width - 1] + "\u2026"
        if fitted is not value:
            changes[name] = fitted
    return msgspec.structs.replace(row, **changes) if changes else row


class QuarantineLog:
    """Rows set aside, as JSON lines: when, from which segment, why, and the row as it was written."""

    def __init__(self, directory: Path, on_quarantine: Callable[[int], None] | None = None) -> None:
        self.path = directory / QUARANTINE_FILE
        self._on_quarantine = on_quarantine
        self.count = 0

    def add(self, segment: str, entries: list[tuple[bytes, str]]) -> None:
        """Append ``(encoded row or line, reason)`` entries durably, before their segment is deleted."""
        if not entries:
            return
        now = time.time()
        lines = b"".join(
            msgspec.json.encode(
                {"at": now, "segment": segment, "reason": reason, "row": raw.decode(errors="replace")}
            )
            + b"\n"
            for raw, reason in entries
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            view = memoryview(lines)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        self.count += len(entries)
        for _, reason in entries:
            log.error("ledger: a row of %s was refused and set aside in %s: %s", segment, self.path, reason)
        if self._on_quarantine is not None:
            self._on_quarantine(len(entries))


def load_rows(
    insert: Callable[[list[LedgerRow]], None], rows: list[LedgerRow]
) -> tuple[int, list[tuple[bytes, str]]]:
    """Insert ``rows`` with ``insert``; (rows inserted, the refused ones encoded with their reasons).
    Errors other than the database refusing a row's data (a lost connection, say) propagate."""
    if not rows:
        return 0, []
    try:
        insert(rows)
        return len(rows), []
    except _REFUSED as exc:
        if len(rows) == 1:
            return 0, [(encode_row(rows[0]), _reason(exc))]
    half = len(rows) // 2
    first, refused_first = load_rows(insert, rows[:half])
    second, refused_second = load_rows(insert, rows[half:])
    return first + second, refused_first + refused_second


def _reason(exc: Exception) -> str:
    cause = getattr(exc, "orig", None) or exc
    return f"{type(cause).__name__}: {cause}".strip()[:_REASON_CHARS]
