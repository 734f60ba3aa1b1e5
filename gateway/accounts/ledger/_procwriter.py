"""The gateway's side of the write-ahead writer process (:mod:`gateway.accounts.ledger._walproc`).

Frames go down a pipe (a plain blocking write: frames are small and the writer drains the
pipe at once); acks come back on a pipe the event loop watches, so no thread and no GIL
hand-off is involved.  If the process dies, every frame it had not acknowledged is handed
to ``on_lost`` (the ledger writes them itself from then on).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

_HELPER = str(Path(__file__).with_name("_walproc.py"))
Waiters = list[asyncio.Future[None]]
# An unacknowledged frame: (rows, waiters) for an append, or a future for a rotation.
_Frame = tuple[bytes, Waiters] | asyncio.Future[int]
OnLost = Callable[[list[tuple[bytes, Waiters]]], None]


class ProcessWriter:
    def __init__(self, directory: Path, first_segment: int, on_lost: OnLost, sync: str = "disk") -> None:
        self._directory = directory
        self._sync = sync
        self._first = first_segment
        self._on_lost = on_lost
        self._frames: collections.deque[_Frame] = collections.deque()
        self._acks = b""
        self._process: subprocess.Popen[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._process = subprocess.Popen(
            [sys.executable, "-I", _HELPER, str(self._directory), str(self._first), self._sync],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
        )
        assert self._process.stdout is not None
        fd = self._process.stdout.fileno()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._on_readable)

    @property
    def alive(self) -> bool:
        return self._process is not None

    def append(self, rows: bytes, waiters: Waiters) -> None:
        self._frames.append((rows, waiters))
        self._send(b"A" + len(rows).to_bytes(4, "big") + rows)

    def rotate(self) -> asyncio.Future[int]:
        assert self._loop is not None
        done: asyncio.Future[int] = self._loop.create_future()
        self._frames.append(done)
        self._send(b"R")
        return done

    def _send(self, frame: bytes) -> None:
        assert self._process is not None and self._process.stdin is not None
        try:
            self._process.stdin.write(frame)
            self._process.stdin.flush()
        except OSError:
            self._lost("its input pipe broke")

    def _on_readable(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        try:
            data = os.read(self._process.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        if not data:
            self._lost("it exited")
            return
        acks = self._acks + data
        i = 0
        while i < len(acks):
            if acks[i : i + 1] == b"k":
                rows_waiters = self._frames.popleft()
                assert isinstance(rows_waiters, tuple)
                for waiter in rows_waiters[1]:
                    if not waiter.done():
                        waiter.set_result(None)
                i += 1
            elif len(acks) - i >= 9:
                rotated = self._frames.popleft()
                assert isinstance(rotated, asyncio.Future)
                if not rotated.done():
                    rotated.set_result(int.from_bytes(acks[i + 1 : i + 9], "big"))
                i += 9
            else:
                break
        self._acks = acks[i:]

    def _lost(self, why: str) -> None:
        if self._process is None:
            return
        log.error("ledger: the write-ahead writer process stopped (%s); writing in-process now", why)
        self._detach()
        unacked = []
        while self._frames:
            frame = self._frames.popleft()
            if isinstance(frame, tuple):
                unacked.append(frame)
            elif not frame.done():
                frame.set_exception(RuntimeError("the write-ahead writer process stopped"))
        self._on_lost(unacked)

    def _detach(self) -> subprocess.Popen[bytes] | None:
        process, self._process = self._process, None
        if process is not None and self._loop is not None and process.stdout is not None:
            self._loop.remove_reader(process.stdout.fileno())
        return process

    async def aclose(self) -> None:
        """Stop the writer; it finishes writing what it was sent before it exits."""
        process = self._detach()
        if process is not None:
            if process.stdin is not None:
                process.stdin.close()
            await asyncio.to_thread(process.wait, 10)
            if process.stdout is not None:
                process.stdout.close()
