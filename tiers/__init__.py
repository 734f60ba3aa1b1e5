"""Tiers: where a generation runs. ``tiers.edge`` runs a small model in-process,
``tiers.cloud`` talks to a pool of vLLM servers. Both implement :class:`Tier`."""

from tiers._cpus import split_cpus, usable_cpus
from tiers._errors import (
    TierError,
    TierFailed,
    TierOverloaded,
    TierRejected,
    TierTimeout,
    TierUnavailable,
)
from tiers._protocol import Pool, Tier
from tiers._types import (
    Capabilities,
    Completion,
    Delta,
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
    "Delta",
    "Generation",
    "Health",
    "MediaLimits",
    "Modality",
    "Pool",
    "Tier",
    "TierError",
    "TierFailed",
    "TierOverloaded",
    "TierRejected",
    "TierState",
    "TierTimeout",
    "TierUnavailable",
    "Usage",
    "split_cpus",
    "usable_cpus",
]
