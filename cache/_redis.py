"""The shared backend: Redis, so several gateway instances answer each other's repeats."""

from __future__ import annotations

import math
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

from redis.exceptions import RedisError

from cache._protocol import CacheError
from cache._redis_client import RedisPolicy, redis_client


def shown_url(url: str) -> str:
    """``url`` without its user and password (``redis://:secret@host:6379/0`` → ``redis://host:6379/0``)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class RedisStore:
    """A :class:`~cache.ResultStore` on Redis (``SET key value PX ttl``, ``GET key``).

    Keys get ``prefix`` so the cache can share a Redis with other users; the
    size bound is Redis' own ``maxmemory`` with an LRU policy.  Every call is
    bounded by ``timeout_s`` (twice that with ``policy``'s one retry): a slow or absent Redis is a
    miss, not a stall; one that is back is used again on the next call (:mod:`cache._redis_client`).
    """

    def __init__(self, url: str, *, prefix: str, timeout_s: float, policy: RedisPolicy | None = None) -> None:
        self._url = shown_url(url)  # for messages: never its password
        self._prefix = prefix
        self._client = redis_client(url, policy or RedisPolicy(), timeout_s=timeout_s)

    async def get(self, key: str) -> bytes | None:
        try:
            value = await self._client.get(self._prefix + key)
        except (RedisError, OSError) as exc:
            raise CacheError(f"redis at {self._url}: {exc}") from exc
        if value is None:
            return None
        return value if isinstance(value, bytes) else str(value).encode()

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        try:
            await self._client.set(self._prefix + key, value, px=max(1, math.ceil(ttl_s * 1000)))
        except (RedisError, OSError) as exc:
            raise CacheError(f"redis at {self._url}: {exc}") from exc

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        if not keys:
            return []
        try:
            values = await self._client.mget([self._prefix + k for k in keys])
        except (RedisError, OSError) as exc:
            raise CacheError(f"redis at {self._url}: {exc}") from exc
        return [None if v is None else v if isinstance(v, bytes) else str(v).encode() for v in values]

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        px = max(1, math.ceil(ttl_s * 1000))
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, value in items:
                    pipe.set(self._prefix + key, value, px=px)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            raise CacheError(f"redis at {self._url}: {exc}") from exc

    async def aclose(self) -> None:
        await self._client.aclose()
