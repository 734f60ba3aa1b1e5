"""Decoded media by content: the same bytes with the same parameters are decoded once."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from cache import sqlite_memory
from gateway.media._config import MediaCacheSettings

log = logging.getLogger(__name__)


def content_key(kind: str, data: bytes, params: Any) -> str:
    """SHA-256 of the medium, plus its kind and the parameters that shape the result."""
    return f"media:{kind}:{hashlib.sha256(data).hexdigest()}:{params!r}"


class MediaCache:
    """diskcache under the data folder; a cache that fails is a miss, never an error.

    Read and written on one thread of its own: diskcache opens a SQLite connection per thread, and
    on the loop's shared executor (up to ``cores + 4`` threads) each would grow its own page cache.
    """

    def __init__(self, directory: Path, settings: MediaCacheSettings) -> None:
        import diskcache

        directory.mkdir(parents=True, exist_ok=True)
        self._cache = diskcache.Cache(
            str(directory),
            size_limit=settings.max_bytes,
            eviction_policy="least-recently-used",
            **sqlite_memory(settings.sqlite_cache_mib, settings.sqlite_mmap_mib),
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="media-cache")

    async def get(self, key: str) -> Any | None:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, self._cache.get, key)
        except Exception as exc:
            log.warning("media cache read failed: %s", exc)
            return None

    async def put(self, key: str, value: Any) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._cache.set, key, value)
        except Exception as exc:
            log.warning("media cache write failed: %s", exc)

    def close(self) -> None:
        self._thread.submit(self._cache.close).result()  # its connection is the thread's
        self._thread.shutdown()
        self._cache.close()  # the one opened here, on the caller's thread
