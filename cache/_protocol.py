"""The one small interface every cache backend implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable


class CacheError(Exception):
    """A backend could not be read or written; callers treat it as a miss, never as a failure."""


@runtime_checkable
class ResultStore(Protocol):
    """Bytes by key, with a time to live. Every method is safe to await on the event loop."""

    async def get(self, key: str) -> bytes | None: ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """One value (or None) per key, in one round trip (embeddings look up a batch's inputs)."""
        ...

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        """Several values in one round trip (one transaction on disk)."""
        ...

    async def aclose(self) -> None: ...
