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
from router._cost import TierPrice
from router._decision import (
    CLOUD,
    EDGE,
    AutoRule,
    Decision,
    NoTierAvailable,
    RequestDoesNotFit,
    RouteDetail,
    TierView,
    auto,
    decide,
    pinned,
    to_degrade,
)
from router._difficulty import DifficultyModel, LabelledExample, builtin_model, read_examples, train
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
from router._predictor import FEATURE_NAMES, Prediction, PredictorConfig, TierPredictor, design, fit_tier
from router._router import Router
from router._strategies import STRATEGY_NAMES, BudgetExhausted, RouteRequest, Spend, Strategy

__all__ = [
    "CLOUD",
    "DEFAULT_POLICY",
    "EDGE",
    "FEATURE_NAMES",
    "NO_MEDIA",
    "PERIODS",
    "STRATEGIES",
    "STRATEGY_NAMES",
    "AutoRule",
    "BreakerBoard",
    "BreakerConfig",
    "BreakerSnapshot",
    "BreakerState",
    "Budget",
    "BudgetExhausted",
    "CircuitBreaker",
    "Decision",
    "DifficultyModel",
    "Features",
    "LabelledExample",
    "LatencyObjective",
    "MediaSummary",
    "NoTierAvailable",
    "PolicyInvalid",
    "Prediction",
    "PredictorConfig",
    "RequestDoesNotFit",
    "RouteDetail",
    "RouteRequest",
    "Router",
    "Spend",
    "Strategy",
    "TenantPolicy",
    "TierPredictor",
    "TierPrice",
    "TierView",
    "attributed",
    "auto",
    "builtin_model",
    "check_policy",
    "decide",
    "decode_policy",
    "design",
    "fit_tier",
    "pinned",
    "read_examples",
    "to_degrade",
    "train",
]
