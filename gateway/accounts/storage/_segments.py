"""Append-only segment files: what a writer must not lose before its rows are in the database.

Lines go to ``<dir>/segment-<n>.jsonl``.  The loader closes the current segment (a new one takes the
appends), moves the closed ones into the database, then deletes them; a segment left by a killed
process is loaded on the next start.  Blocking; one thread owns appends and rotation (the event
loop's own, when appends are not synced: a page-cache write costs a few microseconds).  The ledger
(gateway/accounts/ledger/_wal.py) and the stored responses (gateway/accounts/held_responses.py)
each keep their rows in a folder of them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import msgspec

T = TypeVar("T")

_PATTERN = "segment-*.jsonl"


def segment_number(path: Path) -> int:
    return int(path.stem.split("-", 1)[1])


class WriteAheadLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        existing = self.segments()
        self._next = segment_number(existing[-1]) + 1 if existing else 1
        self._fd: int | None = None
        self._path: Path | None = None
        self._dirty = False

    @property
    def next_number(self) -> int:
        """The number the next segment opened will get."""
        return self._next

    def segments(self) -> list[Path]:
        """Segments on disk, oldest first (the open one last)."""
        return sorted(self.directory.glob(_PATTERN), key=segment_number)

    def append(self, data: bytes, *, sync: bool = True) -> None:
        """Write ``data`` (whole lines); with ``sync``, make it durable on disk before returning.
        Without, it is in the operating system's hands (it survives the process being killed)."""
        if self._fd is None:
            self._path = self.directory / f"segment-{self._next}.jsonl"
            self._next += 1
            self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            if sync:
                _fsync_dir(self.directory)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]
        if sync:
            os.fdatasync(self._fd)
        self._dirty = True

    def rotate(self) -> list[Path]:
        """Close the open segment; return every closed segment, oldest first."""
        if self._fd is not None and self._dirty:
            os.close(self._fd)
            self._fd, self._path, self._dirty = None, None, False
        return [p for p in self.segments() if p != self._path]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd, self._path = None, None


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_lines(
    path: Path, decode: Callable[[bytes], T], refused: Callable[[int, bytes, str], None]
) -> list[T]:
    """A segment's lines, decoded.  A torn last line (no newline after it: the process was killed in
    that write, which was never acknowledged) is skipped; ``refused`` hears of any other line that
    ``decode`` refuses (its number, the line, why), which only a damaged disk makes."""
    decoded = []
    lines = path.read_bytes().split(b"\n")
    for i, line in enumerate(lines):
        if not line:
            continue
        try:
            decoded.append(decode(line))
        except msgspec.DecodeError as exc:
            if i != len(lines) - 1:
                refused(i + 1, line, str(exc))
    return decoded
