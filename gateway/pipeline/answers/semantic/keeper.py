"""Where the semantic index lives between restarts, and how several gateways keep theirs in step.

Embedded (cache backend ``disk``): the index is saved to ``<data_dir>/cache/semantic/index.msgpack``
every ``save_interval_s`` when it changed, and at close; a gateway that starts loads it (entries past
their expiry are dropped).  The file is written beside and renamed over the old one, so a crash leaves
the last complete save.

Shared (cache backend ``redis``): every entry a gateway adds is appended to one Redis stream; every
gateway reads that stream from its start when it starts (the catch-up) and then follows it, adding
what the others add.  A Redis that is away is retried every few seconds; meanwhile each gateway
answers from what it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path

import cache
from gateway.ops import background

log = logging.getLogger(__name__)
RETRY_S = 2.0


class DiskKeeper:
    def __init__(self, index: cache.SemanticIndex, path: Path, interval_s: float) -> None:
        self._index = index
        self._path = path
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.changed = False

    async def start(self) -> None:
        if self._path.is_file():
            data = await asyncio.to_thread(self._path.read_bytes)
            loaded = self._index.load(data)
            log.info("semantic cache: %d entries loaded from %s", loaded, self._path)
        self._task = asyncio.create_task(self._every(), name="semantic-save")

    async def added(self, entry: cache.Entry) -> None:
        self.changed = True

    async def save(self) -> None:
        """Write the index if it changed since the last save (dumped here, written off the loop)."""
        if not self.changed:
            return
        self.changed = False
        data = self._index.dump()
        await asyncio.to_thread(_write, self._path, data)

    async def _every(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.save()
            except OSError as exc:
                log.warning("semantic cache: cannot save %s: %s", self._path, exc)

    async def aclose(self) -> None:
        await background.stop(self._task)
        try:
            await self.save()
        except OSError as exc:
            log.warning("semantic cache: cannot save %s: %s", self._path, exc)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    part.write_bytes(data)
    os.replace(part, path)


class FeedKeeper:
    def __init__(self, index: cache.SemanticIndex, feed: cache.SemanticFeed) -> None:
        self._index = index
        self._feed = feed
        self._after = cache.START
        self._task: asyncio.Task[None] | None = None
        self._caught_up = asyncio.Event()

    async def start(self) -> None:
        """Catch up (a short wait: a Redis that is away is caught up with later), then follow."""
        self._task = asyncio.create_task(self._follow(), name="semantic-feed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._caught_up.wait(), 5.0)

    async def added(self, entry: cache.Entry) -> None:
        try:
            await self._feed.append(entry)
        except cache.CacheError as exc:
            log.warning("semantic cache: entry not shared: %s", exc)

    def _take(self, entries: list[cache.Entry]) -> None:
        for entry in entries:
            self._index.add_wire(entry)

    async def _follow(self) -> None:
        while True:
            try:
                if not self._caught_up.is_set():
                    while True:
                        self._after, entries = await self._feed.read(self._after, block=False)
                        self._take(entries)
                        if not entries:
                            break
                    self._caught_up.set()
                    log.info("semantic cache: %d entries after the catch-up", len(self._index))
                self._after, entries = await self._feed.read(self._after, block=True)
                self._take(entries)
            except cache.CacheError as exc:
                log.warning("semantic cache: the shared stream is unreadable, retrying: %s", exc)
                await asyncio.sleep(RETRY_S)

    async def aclose(self) -> None:
        await background.stop(self._task)
        await self._feed.aclose()
