"""The one interface every backend implements."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

from tiers._types import Capabilities, Completion, Delta, Generation, TierState


@runtime_checkable
class Tier(Protocol):
    """A place where a chat generation can run.

    ``start`` returns quickly; a tier that needs time to become ready reports
    ``Health.STARTING`` until it is.  ``stream`` yields text pieces as the
    engine makes them; closing the iterator early cancels the generation.
    """

    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    def state(self) -> TierState: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def complete(self, gen: Generation) -> Completion: ...

    def stream(self, gen: Generation) -> AsyncIterator[Delta]: ...


@runtime_checkable
class Pool(Protocol):
    """A tier made of replicas whose membership operators change at run time."""

    def replicas(self) -> list[dict[str, Any]]: ...

    def set_members(self, urls: Sequence[str]) -> None: ...

    def drain(self, name: str) -> bool: ...
