"""The ledger's write-ahead file: rows appended (and fsynced in batches), replayed on start.

Rows go to ``<dir>/segment-<n>.jsonl``.  The loader closes the current segment (a new one
takes the appends), moves the closed one into the database, then deletes it.  A segment
left by a killed process is loaded on the next start; rows carry their own id, so loading
one twice inserts nothing twice.  Blocking; one thread owns appends and rotation (the event
loop's own, when appends are not synced: a page-cache write costs a few microseconds).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from gateway.accounts.ledger._row import LedgerRow, decode_row
from gateway.accounts.storage import WriteAheadLog, segment_number

__all__ = ["WriteAheadLog", "read_segment", "segment_number"]


def read_segment(path: Path, bad: list[tuple[bytes, str]] | None = None) -> list[LedgerRow]:
    """The rows of a segment; a torn last line (killed mid-write, never acknowledged) is skipped.
    Other lines that are not rows are skipped too, and added to ``bad`` with the reason."""
    rows = []
    data = path.read_bytes()
    lines = data.split(b"\n")
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            rows.append(decode_row(line))
        except msgspec.DecodeError as exc:
            torn = i == len(lines) - 1  # no newline after it: the write never finished
            if bad is not None and not torn:
                bad.append((line, f"not a ledger row: {exc}"))
    return rows
