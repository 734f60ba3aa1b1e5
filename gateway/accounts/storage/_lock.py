"""One gateway per data folder: an exclusive lock on ``<data_dir>/tiergate.lock``.

Two gateways on one folder would load and delete each other's open ledger segments. The lock is
``flock``: the kernel drops it when its holder exits, however it exits (SIGKILL too), so a stale
file never blocks a start. The file names the holder's pid for the message a second gateway gives.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_FILE = "tiergate.lock"


class DataFolderInUse(RuntimeError):
    """Another live process holds the data folder; the message names it."""


class DataFolderLock:
    def __init__(self, data_path: Path) -> None:
        self.path = data_path / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataFolderInUse(
                f"another gateway (pid {owner}) is using the data folder {self.path.parent}; "
                "stop it, or give this one a data_dir of its own"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the lock
            self._fd = None

    def __enter__(self) -> DataFolderLock:
        self.acquire()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
