"""Routing: from a request's features and the tiers' states to a decision with its reason.

The router knows no HTTP and no storage; it sees tiers only as capability and
state values.
"""

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
)
from router._features import Features

__all__ = [
    "CLOUD",
    "EDGE",
    "AutoRule",
    "Decision",
    "Features",
    "NoTierAvailable",
    "RequestDoesNotFit",
    "TierView",
    "auto",
    "decide",
    "pinned",
]
