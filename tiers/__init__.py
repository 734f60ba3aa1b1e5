"""Tiers: where a generation runs. ``tiers.edge`` runs a small model in-process,
``tiers.cloud`` talks to a pool of vLLM servers. Both implement :class:`Tier`: one
``generate`` method, a stream of :data:`Event` values, from which :func:`collect`
makes a JSON answer."""

from tiers._cpus import split_cpus, usable_cpus
from tiers._errors import (
    InvalidModel,
    NothingToRollBack,
    RegistryError,
    TierError,
    TierFailed,
    TierOverloaded,
    TierRejected,
    TierTimeout,
    TierUnavailable,
    UnknownModel,
)
from tiers._events import Event, EventStream, Finished, Started, TextDelta, collect
from tiers._protocol import ModelRegistry, Pool, ReplicaListener, SharedReplicas, Tier
from tiers._types import (
    Capabilities,
    Completion,
    Generation,
    Health,
    MediaLimits,
    Modality,
    TierState,
    Usage,
)

__all__ = [
    "Capabilities",
    "Completion",
    "Event",
    "EventStream",
    "Finished",
    "Generation",
    "Health",
    "InvalidModel",
    "MediaLimits",
    "Modality",
    "ModelRegistry",
    "NothingToRollBack",
    "Pool",
    "RegistryError",
    "ReplicaListener",
    "SharedReplicas",
    "Started",
    "TextDelta",
    "Tier",
    "TierError",
    "TierFailed",
    "TierOverloaded",
    "TierRejected",
    "TierState",
    "TierTimeout",
    "TierUnavailable",
    "UnknownModel",
    "Usage",
    "collect",
    "split_cpus",
    "usable_cpus",
]
