"""Routing: from a request's features and the tiers' states to a decision with its reason.

    learner = Learner(prices)                                   # owns everything learned
    snapshot = learner.snapshot(features, views, policy, spend)
    decision = Router(rule).decide(features, views, policy, snapshot)  # pure: changes nothing
    learner.routed(decision)                                    # books the work sent
    ...
    learner.observe(decision, tier, ttft_s, total_s, completion_tokens, prompt_tokens)
    # ... or, as the gateway does, off the request path: finished() there, fold(batch) later

The router knows no HTTP and no storage; it sees tiers only as capability and state values,
by the names configuration gives them.  A decision's reason is a typed :class:`Reason` (its
:class:`ReasonKind` labels metrics) and its text is rendered from it.
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
    AutoRule,
    Decision,
    NoTierAvailable,
    RequestDoesNotFit,
    TierView,
    to_degrade,
)
from router._features import NO_MEDIA, Features, MediaSummary
from router._learning.difficulty import DifficultyModel, LabelledExample, builtin_model, read_examples, train
from router._learning.fit import fit_tier
from router._learning.learner import Label, Learner, Observed
from router._learning.predictor import (
    FEATURE_NAMES,
    Prediction,
    PredictorConfig,
    TierPredictor,
    design,
)
from router._learning.quality import (
    Acceptability,
    QualityConfig,
    QualityKeys,
    QualityModel,
    quality_keys,
)
from router._policy import (
    ACTION_ORDER,
    DEFAULT_POLICY,
    PERIODS,
    STRATEGY_ALIASES,
    Budget,
    LatencyObjective,
    PolicyInvalid,
    ResidencyRule,
    SemanticCachePolicy,
    ShadowPolicy,
    TagBudget,
    TenantPolicy,
    always_tier,
    canonical_strategy,
    check_policy,
    decode_policy,
    strategy_names,
)
from router._reason import Acceptance, ContextTooSmall, Exclusion, Failover, KeptLocal, Lacks, Reason
from router._reason import Kind as ReasonKind
from router._router import Router
from router._snapshot import NOTHING_LEARNED, Snapshot, Spend
from router._strategies import BudgetExhausted, Choice, RouteRequest, Strategy

__all__ = [
    "ACTION_ORDER",
    "DEFAULT_POLICY",
    "FEATURE_NAMES",
    "NOTHING_LEARNED",
    "NO_MEDIA",
    "PERIODS",
    "STRATEGY_ALIASES",
    "Acceptability",
    "Acceptance",
    "AutoRule",
    "BreakerBoard",
    "BreakerConfig",
    "BreakerSnapshot",
    "BreakerState",
    "Budget",
    "BudgetExhausted",
    "Choice",
    "CircuitBreaker",
    "ContextTooSmall",
    "Decision",
    "DifficultyModel",
    "Exclusion",
    "Failover",
    "Features",
    "KeptLocal",
    "Label",
    "LabelledExample",
    "Lacks",
    "LatencyObjective",
    "Learner",
    "MediaSummary",
    "NoTierAvailable",
    "Observed",
    "PolicyInvalid",
    "Prediction",
    "PredictorConfig",
    "QualityConfig",
    "QualityKeys",
    "QualityModel",
    "Reason",
    "ReasonKind",
    "RequestDoesNotFit",
    "ResidencyRule",
    "RouteRequest",
    "Router",
    "SemanticCachePolicy",
    "ShadowPolicy",
    "Snapshot",
    "Spend",
    "Strategy",
    "TagBudget",
    "TenantPolicy",
    "TierPredictor",
    "TierPrice",
    "TierView",
    "always_tier",
    "attributed",
    "builtin_model",
    "canonical_strategy",
    "check_policy",
    "decode_policy",
    "design",
    "fit_tier",
    "quality_keys",
    "read_examples",
    "strategy_names",
    "to_degrade",
    "train",
]
