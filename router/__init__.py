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

__all__ = [
    "CLOUD",
    "EDGE",
    "NO_MEDIA",
    "AutoRule",
    "BreakerBoard",
    "BreakerConfig",
    "BreakerSnapshot",
    "BreakerState",
    "CircuitBreaker",
    "Decision",
    "Features",
    "MediaSummary",
    "NoTierAvailable",
    "RequestDoesNotFit",
    "TierView",
    "attributed",
    "auto",
    "decide",
    "pinned",
    "to_degrade",
]
