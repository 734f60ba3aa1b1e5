"""What decided a request's tier, as the metrics label it is counted under."""

from __future__ import annotations

import enum
from collections.abc import Iterable

from tiers import Modality


class Kind(enum.Enum):
    """What decided a request's tier; the value is the metrics label."""

    PINNED = "pinned"  # the client named the tier
    SIZE = "size"  # the rule: small requests to the small model, the rest to the large one
    POLICY = "policy"  # the tenant's strategy names the tier, or no latency objective to weigh
    PREFERRED = "preferred"  # the tenant's preferred tier meets its objective
    SLO = "slo"  # the cheapest tier predicted to meet the latency objective
    SLO_UNMET = "slo_unmet"  # no tier is predicted to meet it: the likeliest
    QUALITY_UNMET = "quality_unmet"  # no tier has the quality needed: the closest
    BUDGET = "budget"  # the budget is spent: the cheapest
    EXPLORATION = "exploration"  # a tier not measured lately, to keep it measured
    ROUND_ROBIN = "round_robin"
    BREAKER_OPEN = "breaker_open"
    TIER_UNAVAILABLE = "tier_unavailable"  # down, starting, disabled, not configured
    CAPABILITY = "capability"  # a modality, medium or context the tier does not take
    FAILOVER = "failover"  # the chosen tier failed before its first byte; the next served


def names(modalities: Iterable[Modality]) -> str:
    return ", ".join(sorted(m.value for m in modalities))
