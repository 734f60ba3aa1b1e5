"""Decoded media by content: the same bytes with the same parameters are decoded once."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def content_key(kind: str, data: bytes, params: Any) -> str:
    """SHA-256 of the medium, plus its kind and the parameters that shape the result."""
    return f"media:{kind}:{hashlib.sha256(data).hexdigest()}:{params!r}"


class MediaCache:
    """diskcache under the data folder; a cache that fails is a miss, never an error."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        import diskcache

        directory.mkdir(parents=True, exist_ok=True)
        self._cache = diskcache.Cache(
            str(directory), size_limit=max_bytes, eviction_policy="least-recently-used"
        )

    async def get(self, key: str) -> Any | None:
        try:
            return await asyncio.to_thread(self._cache.get, key)
        except Exception as exc:
            log.warning("media cache read failed: %s", exc)
            return None

    async def put(self, key: str, value: Any) -> None:
        try:
            await asyncio.to_thread(self._cache.set, key, value)
        except Exception as exc:
            log.warning("media cache write failed: %s", exc)

    def close(self) -> None:
        self._cache.close()
