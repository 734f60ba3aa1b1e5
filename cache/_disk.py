"""The embedded backend: diskcache (SQLite + files) in the data folder, called off the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import diskcache

from cache._protocol import CacheError

T = TypeVar("T")


INLINE_READ_KEYS = 8  # a get_many of at most this many keys reads on the event loop itself
INLINE_BUSY_S = 0.005  # how long such a read may wait for a lock before it goes to the thread


def sqlite_memory(cache_mib: int, mmap_mib: int) -> dict[str, int]:
    """diskcache's settings that bound one SQLite connection's memory: its page cache (a negative
    ``cache_size`` is KiB, whatever the page size) and its memory map, ``cache_mib`` and ``mmap_mib``."""
    return {"sqlite_cache_size": -1024 * cache_mib, "sqlite_mmap_size": mmap_mib * 1024 * 1024}


class DiskStore:
    """A :class:`~cache.ResultStore` on diskcache.

    Writes, opening, closing and large reads run on one private worker thread, so a
    write never blocks the event loop.  A ``get`` (a chat request's lookup) and a
    ``get_many`` of a few keys (an embeddings request's) read on the loop instead,
    through a second diskcache handle whose SQLite connection waits at most
    ``INLINE_BUSY_S`` for a lock: in WAL mode a reader does not wait for the writer,
    and one read from the page cache is ~0.02 ms, where the hop to the thread and
    back measured ~0.6 ms on 2 busy cores and costs a cache hit half its CPU
    (docs/performance.md, ``bench/cache_read.py``).  A read that finds the
    database locked all the same (recovery, a checkpoint) is done again on the
    thread.  ``max_bytes`` is diskcache's ``size_limit`` (a soft bound: it culls
    least recently stored entries on writes).  ``memory`` (:func:`sqlite_memory`) bounds each of
    the two SQLite connections' page cache and memory map.
    """

    def __init__(self, directory: str | Path, max_bytes: int, memory: dict[str, int] | None = None) -> None:
        self._directory = Path(directory)
        self._max_bytes = max_bytes
        self._memory = memory or {}
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="diskcache")
        self._cache: diskcache.Cache | None = None
        self._reader: diskcache.Cache | None = None  # the loop's handle (opened on the thread)

    def _open(self) -> diskcache.Cache:
        if self._cache is None:
            self._directory.mkdir(parents=True, exist_ok=True)
            self._cache = diskcache.Cache(
                str(self._directory),
                size_limit=self._max_bytes,
                eviction_policy="least-recently-stored",
                **self._memory,
            )
            # Its settings are the ones the first handle wrote; only the lock wait differs.
            self._reader = diskcache.Cache(str(self._directory), timeout=INLINE_BUSY_S)
        return self._cache

    def _get(self, key: str) -> bytes | None:
        value = self._open().get(key, default=None, retry=True)
        return value if isinstance(value, bytes) else None

    def _set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._open().set(key, value, expire=ttl_s, retry=True)

    def _get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return [self._get(key) for key in keys]

    def _set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        cache = self._open()
        with cache.transact(retry=True):  # one SQLite transaction, not one per value
            for key, value in items:
                cache.set(key, value, expire=ttl_s, retry=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
        # sqlite3.Error: "database or disk is full" (SQLITE_FULL) and other failures of its database
        except (OSError, sqlite3.Error, diskcache.Timeout) as exc:
            raise CacheError(f"diskcache at {self._directory}: {exc}") from exc

    async def get(self, key: str) -> bytes | None:
        return (await self.get_many([key]))[0]

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._run(self._set, key, value, ttl_s)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if self._reader is not None and len(keys) <= INLINE_READ_KEYS:
            try:
                values = [self._reader.get(key, default=None, retry=False) for key in keys]
                return [v if isinstance(v, bytes) else None for v in values]
            except diskcache.Timeout:
                pass  # locked past INLINE_BUSY_S: read on the thread, which may wait
            except (OSError, sqlite3.Error) as exc:
                raise CacheError(f"diskcache at {self._directory}: {exc}") from exc
        return await self._run(self._get_many, keys)

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        await self._run(self._set_many, items, ttl_s)

    async def aclose(self) -> None:
        if self._cache is not None:
            await self._run(self._cache.close)
        if self._reader is not None:
            self._reader.close()  # closes the calling thread's connection: the loop's
        self._executor.shutdown(wait=False)
