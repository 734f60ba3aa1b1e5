"""Writes held for a moment and stored together, in front of any :class:`~cache.ResultStore`.

A one-text embeddings request stores one vector.  Written at once, each costs a hop to the disk
store's thread and an SQLite transaction (or a Redis round trip), run while the next request's model
call computes, on the same 2 cores: measured, that made the model call ~1.5 ms slower per request
(docs/performance.md).  Held here for up to ``delay_s`` (or until ``max_pending`` values wait), the
vectors of many requests go out as one ``set_many``: one hop and one transaction for all of them.

What a reader sees: this process finds a held value at once (``get`` and ``get_many`` look here
first); another gateway sharing the store (Redis, or the same cache folder) finds it once it is
flushed, at most ``delay_s`` later, and until then computes it again, which is a cache's ordinary miss.
A value still held when the process is killed is lost (the cache is not a record: nothing is wrong,
the next request computes it again); ``aclose`` flushes what is held.  Memory is bounded: while a slow
store is still writing one batch, at most ``max_pending`` more values wait, and what comes on top is
not stored (counted in ``dropped``; again only a later miss).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from cache._protocol import CacheError, ResultStore

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Held:
    value: bytes
    ttl_s: float
    since: float  # when it was held, on the monotonic clock


class BufferedWrites:
    """A :class:`~cache.ResultStore` whose writes wait in memory and are stored in batches.

    It does not own ``store``: ``aclose`` flushes, it does not close the store under it.
    """

    def __init__(self, store: ResultStore, *, delay_s: float = 0.25, max_pending: int = 256) -> None:
        self._store = store
        self._delay_s = delay_s
        self._max_pending = max_pending
        self._pending: dict[str, _Held] = {}
        self._flushing: dict[str, _Held] = {}  # the batch being written now
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self.dropped = 0  # values not stored because the buffer was full behind a slow write

    def _held(self, key: str) -> bytes | None:
        held = self._pending.get(key) or self._flushing.get(key)
        return held.value if held is not None and held.since + held.ttl_s > time.monotonic() else None

    async def get(self, key: str) -> bytes | None:
        held = self._held(key)
        return held if held is not None else await self._store.get(key)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        found = [self._held(k) for k in keys]
        missing = [k for k, v in zip(keys, found, strict=True) if v is None]
        if missing:
            stored = iter(await self._store.get_many(missing))
            found = [v if v is not None else next(stored) for v in found]
        return found

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self.set_many([(key, value)], ttl_s)

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        now = time.monotonic()
        for key, value in items:
            behind = self._task is not None and len(self._pending) >= self._max_pending
            if behind and key not in self._pending:
                self.dropped += 1  # the store is behind: a cache may forget, memory may not grow
                continue
            self._pending[key] = _Held(value, ttl_s, now)
        if len(self._pending) >= self._max_pending:
            self._flush_soon(0.0)
        elif self._timer is None:
            self._flush_soon(self._delay_s)

    def _flush_soon(self, delay_s: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._start_flush)

    def _start_flush(self) -> None:
        self._timer = None
        if self._task is None and self._pending:
            self._task = asyncio.get_running_loop().create_task(self._flush())

    async def _flush(self) -> None:
        """Write what is held, one ``set_many`` per time to live asked, each value's life counted from
        when the oldest of them was held (so none outlives its TTL; some end up to ``delay_s`` early);
        then again if more came meanwhile."""
        try:
            while self._pending:
                self._flushing, self._pending = self._pending, {}
                by_ttl: dict[float, list[tuple[str, bytes]]] = {}
                oldest: dict[float, float] = {}
                for key, held in self._flushing.items():
                    by_ttl.setdefault(held.ttl_s, []).append((key, held.value))
                    oldest[held.ttl_s] = min(oldest.get(held.ttl_s, held.since), held.since)
                for ttl_s, items in by_ttl.items():
                    left_s = oldest[ttl_s] + ttl_s - time.monotonic()
                    if left_s <= 0:
                        continue  # expired while held
                    try:
                        await self._store.set_many(items, left_s)
                    except CacheError as exc:
                        log.warning("cache write of %d values failed: %s", len(items), exc)
                self._flushing = {}
        finally:
            self._flushing = {}
            self._task = None

    async def flush(self) -> None:
        """Store everything held now (and wait for it)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None:
            await asyncio.shield(self._task)
        if self._pending:
            self._task = asyncio.get_running_loop().create_task(self._flush())
            await asyncio.shield(self._task)

    async def aclose(self) -> None:
        await self.flush()
