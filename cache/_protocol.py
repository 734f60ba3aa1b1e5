"""The one small interface every cache backend implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


class CacheError(Exception):
    """A backend could not be read or written; callers treat it as a miss, never as a failure."""


@runtime_checkable
class ResultStore(Protocol):
    """Bytes by key, with a time to live. Every method is safe to await on the event loop."""

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def aclose(self) -> None: ...
