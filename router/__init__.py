"""Routing: from a request's features and the tiers' states to a decision with its reason.

The router knows no HTTP and no storage; it sees tiers only as capability and
state values.
"""

from router._breaker import (
    BreakerBoard,
    BreakerConfig,
    BreakerSnapshot,
    BreakerState,
    CircuitBreaker,
    attributed,
)
from router._decision import (
    CLOUD,
    EDGE,
    AutoRule,
    Decision,
    NoTierAvailable,
    RequestDoesNotFit,
    TierView,
    auto,
    decide,
    pinned,
    to_degrade,
)
from router._features import NO_MEDIA, Features, MediaSummary
from router._policy import (
    DEFAULT_POLICY,
    PERIODS,
    STRATEGIES,
    Budget,
    LatencyObjective,
    PolicyInvalid,
    TenantPolicy,
    check_policy,
    decode_policy,
)

__all__ = [
    "CLOUD",
    "DEFAULT_POLICY",
    "EDGE",
    "NO_MEDIA",
    "PERIODS",
    "STRATEGIES",
    "AutoRule",
    "BreakerBoard",
    "BreakerConfig",
    "BreakerSnapshot",
    "BreakerState",
    "Budget",
    "CircuitBreaker",
    "Decision",
    "Features",
    "LatencyObjective",
    "MediaSummary",
    "NoTierAvailable",
    "PolicyInvalid",
    "RequestDoesNotFit",
    "TenantPolicy",
    "TierView",
    "attributed",
    "auto",
    "check_policy",
    "decide",
    "decode_policy",
    "pinned",
    "to_degrade",
]
