"""What is known about a request's tiers at the moment it is routed, as one immutable value.

:meth:`router.Learner.snapshot` takes it: per tier the feature vector and the prediction made
from it, the request's expected share of ``max_tokens`` and its difficulty, which tiers have
not been measured lately, this request's exploration draw and round-robin turn, and the
tenant's spend.  :meth:`router.Router.decide` reads it and changes nothing; the decision
carries it back to :meth:`router.Learner.observe`, which learns from what the request then took.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from router._features import Features
from router._learning.predictor import Prediction
from router._learning.quality import Acceptability, QualityKeys


@dataclass(frozen=True, slots=True)
class Spend:
    """The tenant's spend in the policy's current period (from the ledger)."""

    spent_usd: float
    seconds_left: float  # until the period ends


@dataclass(frozen=True, slots=True)
class Snapshot:
    features: Features | None = None
    vectors: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    predictions: Mapping[str, Prediction] = field(default_factory=dict)
    # Per tier, whether a request sent there now waits for a slot (for the book of work in hand).
    queues: Mapping[str, bool] = field(default_factory=dict)
    output_keys: tuple[int, ...] = ()  # the request's features for the output-share model
    output_share: float = 1.0  # the share of max_tokens its answer is expected to use
    difficulty: float | None = None  # estimated, when the policy weighs it
    # Tiers that served none of the last requests routed (None: not known, all may be explored).
    unmeasured: frozenset[str] | None = None
    exploration: float = 0.0  # the share of learned-strategy requests explored
    explore: float | None = None  # set (a uniform draw in [0, 1)) when this request is explored
    turn: int = 0  # round-robin's turn
    spend: Spend | None = None
    ticket: int = 0  # the request's entry in the learner's book of work in hand
    at: float = 0.0  # the learner's clock when it was taken
    # Per tier, its learned acceptability for this request (learned strategy only), and the request's
    # features for the quality model (a label for its answer is learned over them).
    acceptable: Mapping[str, Acceptability] = field(default_factory=dict)
    quality_keys: QualityKeys | None = None


NOTHING_LEARNED = Snapshot()  # for routing without a learner: the rule, pinned requests
