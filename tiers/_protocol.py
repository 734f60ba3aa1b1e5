"""The interfaces the gateway sees tiers through: :class:`Tier`, and what some tiers add
(:class:`Pool` of replicas, :class:`ModelRegistry` of versions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from tiers._events import EventStream
from tiers._types import Capabilities, Generation, TierState

Spec = TypeVar("Spec", contravariant=True)


@runtime_checkable
class Tier(Protocol):
    """A place where a chat generation can run.

    ``start`` returns quickly; a tier that needs time to become ready reports
    ``Health.STARTING`` until it is.  ``generate`` is the one way to run a
    generation: it yields :class:`~tiers.Started`, text pieces as the engine
    makes them, then :class:`~tiers.Finished`; an error before the first event
    means nothing was produced (another tier may serve), and closing the stream
    early cancels the generation.  A JSON answer is :func:`~tiers.collect`-ed
    from it.
    """

    name: str

    @property
    def capabilities(self) -> Capabilities: ...

    def state(self) -> TierState: ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    def generate(self, gen: Generation) -> EventStream: ...


@runtime_checkable
class Pool(Protocol):
    """A tier made of replicas whose membership operators change at run time."""

    def replicas(self) -> list[dict[str, Any]]: ...

    def set_members(self, urls: Sequence[str]) -> None: ...

    def drain(self, name: str) -> bool: ...


# Told when a replica's health flips or it is ejected: (url, healthy, ejected for seconds, why).
ReplicaListener = Callable[[str, bool, float, str], None]


@runtime_checkable
class SharedReplicas(Pool, Protocol):
    """A pool whose replicas' health several gateways share: it reports what it sees of them, and
    takes what the others saw."""

    def watch_replicas(self, listener: ReplicaListener) -> None: ...

    def apply_replica_state(self, url: str, *, healthy: bool, ejected_for_s: float, why: str) -> None: ...


@runtime_checkable
class ModelRegistry(Protocol[Spec]):
    """A tier that serves one of several registered model versions, swapped at run time (hot swap,
    rollback). ``Spec`` is what a version is described by (the edge's: ``tiers.edge.EdgeModel``).
    Its methods raise :class:`~tiers.RegistryError`."""

    def models(self) -> dict[str, Any]:
        """Every version with its status, the active one's name and the previous one's."""
        ...

    def register(self, model: Spec) -> None:
        """Add a version (not yet active)."""
        ...

    async def activate(self, name: str) -> None:
        """Serve ``name`` from now on, without dropping a request."""
        ...

    async def rollback(self) -> str:
        """Go back to the version active before; returns its name."""
        ...
