"""The media cache's SQLite memory: one connection (its own thread), its page cache and map as
``[media.cache]`` says (issue 43)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from gateway.media._cache import MediaCache
from gateway.media._config import MediaCacheSettings


async def test_one_thread_one_connection_with_the_configured_memory(tmp_path: Path) -> None:
    cache = MediaCache(tmp_path / "m", MediaCacheSettings(sqlite_cache_mib=3, sqlite_mmap_mib=2))
    threads: set[int] = set()
    read = cache._cache.get

    def note(key: str) -> object:
        threads.add(threading.get_ident())
        return read(key)

    cache._cache.get = note  # type: ignore[method-assign]  # which threads read
    await asyncio.gather(*(cache.put(f"k{i}", i) for i in range(20)))
    assert await asyncio.gather(*(cache.get(f"k{i}") for i in range(20))) == list(range(20))
    assert len(threads) == 1  # not the loop's executor: one connection, not one per thread
    loop = asyncio.get_running_loop()
    size = await loop.run_in_executor(
        cache._thread, lambda: cache._cache._sql("PRAGMA cache_size").fetchone()[0]
    )
    mmap = await loop.run_in_executor(
        cache._thread, lambda: cache._cache._sql("PRAGMA mmap_size").fetchone()[0]
    )
    assert (size, mmap) == (-3 * 1024, 2 << 20)
    cache.close()
