"""The ledger's write-ahead file: rows appended (and fsynced in batches), replayed on start.

Rows go to ``<dir>/segment-<n>.jsonl``.  The loader closes the current segment (a new one
takes the appends), moves the closed one into the database, then deletes it.  A segment
left by a killed process is loaded on the next start; rows carry their own id, so loading
one twice inserts nothing twice.  Blocking; one thread owns appends and rotation (the event
loop's own, when appends are not synced: a page-cache write costs a few microseconds).
"""

from __future__ import annotations

from pathlib import Path

from gateway.accounts.ledger._row import LedgerRow, decode_row
from gateway.accounts.storage import WriteAheadLog, read_lines, segment_number

__all__ = ["WriteAheadLog", "read_segment", "segment_number"]


def read_segment(path: Path, bad: list[tuple[bytes, str]] | None = None) -> list[LedgerRow]:
    """The rows of a segment; a torn last line (killed mid-write, never acknowledged) is skipped.
    Other lines that are not rows are skipped too, and added to ``bad`` with the reason."""

    def refused(_number: int, line: bytes, why: str) -> None:
        if bad is not None:
            bad.append((line, f"not a ledger row: {why}"))

    return read_lines(path, decode_row, refused)
