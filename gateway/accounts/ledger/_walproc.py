"""The write-ahead file's writer: a small child process (standard library only).

Why a process: a thread that fsyncs must take the GIL back after every write and every
fsync, and on a busy event loop each of those hand-offs costs the loop far more than the
write itself (measured: ~100 µs of the gateway's CPU per batch, before the fsync).  Here
the gateway only writes a frame to a pipe and reads a one-byte ack when the rows are on
disk; the fsync happens in another process, on another core if there is one.

Frames on stdin: ``A`` + 4-byte big-endian length + rows (append; answered ``k`` once
fsynced), or ``R`` (close the open segment; answered ``r`` + the 8-byte number of the newest
closed segment).  Frames read together are written with one fsync.  On end of input
(the gateway exited or was killed) it finishes what it read and exits.

    python -I _walproc.py DIRECTORY FIRST_SEGMENT_NUMBER
"""

from __future__ import annotations

import contextlib
import os
import sys

_HEADER = 5


class Segments:
    def __init__(self, directory: str, number: int) -> None:
        self.directory = directory
        self.number = number
        self.fd = -1

    def write(self, data: bytes) -> None:
        if self.fd < 0:
            path = os.path.join(self.directory, f"segment-{self.number}.jsonl")
            self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def sync(self) -> None:
        if self.fd >= 0:
            os.fdatasync(self.fd)

    def rotate(self) -> int:
        """Close the open segment, if any; every segment numbered up to the answer is closed."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            self.number += 1
        return self.number - 1


def serve(
    directory: str, first: int, stdin: int = 0, stdout: int = 1, *, ack_after_sync: bool = True
) -> None:
    """Append what the gateway sends; acknowledge each batch once it is written to the file, and
    (``ack_after_sync``) also synced to the disk. Either way every batch is synced before the next
    read: a group commit, so the disk follows within one batch's time."""
    segments = Segments(directory, first)
    buffer = b""
    eof = False
    while not eof:
        chunk = os.read(stdin, 1 << 20)
        if not chunk:
            eof = True
        buffer += chunk
        acks = bytearray()
        unsynced = 0
        while buffer:
            op = buffer[:1]
            if op == b"R":
                if unsynced:
                    segments.sync()
                    unsynced = 0
                acks += b"r" + segments.rotate().to_bytes(8, "big")
                buffer = buffer[1:]
            elif op == b"A":
                if len(buffer) < _HEADER:
                    break
                size = int.from_bytes(buffer[1:_HEADER], "big")
                if len(buffer) < _HEADER + size:
                    break
                segments.write(buffer[_HEADER : _HEADER + size])
                buffer = buffer[_HEADER + size :]
                unsynced += 1
                acks += b"k"
            else:
                raise SystemExit(f"ledger writer: bad frame {op!r}")
        if unsynced and ack_after_sync:
            segments.sync()
        if acks:
            with contextlib.suppress(BrokenPipeError):  # the gateway is gone; what it sent is written
                os.write(stdout, acks)
        if unsynced and not ack_after_sync:
            segments.sync()
    segments.rotate()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), ack_after_sync=sys.argv[3] == "disk")
