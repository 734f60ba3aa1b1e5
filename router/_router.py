"""The routing decision: features × tier views × tenant policy × the learner's snapshot →
a decision with its reason.  :meth:`Router.decide` is a pure function of its arguments: it
changes nothing, not even the strategies it consults (none keeps state), so the same inputs
always give the same decision.  Learning lives apart, in :class:`router.Learner`.
"""

from __future__ import annotations

from collections.abc import Sequence

from router._decision import (
    AutoRule,
    Decision,
    NoTierAvailable,
    RequestDoesNotFit,
    TierView,
    cannot_take,
    unavailable,
    why_not,
)
from router._features import Features
from router._policy import FIXED_STRATEGIES, TenantPolicy, always_tier
from router._reason import PINNED, Exclusion, Reason
from router._snapshot import NOTHING_LEARNED, Snapshot
from router._strategies import Always, Learned, RoundRobin, RouteRequest, Rule, Strategy
from tiers import Modality

PINNED_STRATEGY = "pinned"


class Router:
    """Decides; keeps nothing.  ``rule``: the size rule of the ``rule`` strategy."""

    __slots__ = ("_strategies", "rule")

    def __init__(self, rule: AutoRule | None = None) -> None:
        self.rule = rule or AutoRule()
        made: tuple[Strategy, ...] = (Learned(), RoundRobin(), Rule(self.rule))
        self._strategies = {s.name: s for s in made}
        assert set(self._strategies) == set(FIXED_STRATEGIES)

    def strategy(self, name: str) -> Strategy:
        """The strategy a policy names (``always:<tier>`` for any tier, older names included)."""
        found = self._strategies.get(name)
        if found is not None:
            return found
        tier = always_tier(name)
        if tier is None:
            raise ValueError(f"unknown strategy {name!r}")
        return Always(tier)

    def decide(
        self,
        features: Features,
        views: Sequence[TierView],
        policy: TenantPolicy,
        snapshot: Snapshot = NOTHING_LEARNED,
    ) -> Decision:
        """Route a request (to ``features.pinned`` when the client named a tier).  Raises
        :class:`NoTierAvailable` (or :class:`RequestDoesNotFit`) when no tier can take it, and
        :class:`router.BudgetExhausted` when its tenant's budget is spent and the policy refuses.
        The learned strategy needs the snapshot's prediction for every able tier."""
        if features.pinned is not None:
            return _pinned(features.pinned, views, features, snapshot)
        excluded: list[Exclusion] = []
        able = []
        for view in views:
            why = why_not(view, features)
            if why is None:
                able.append(view)
            else:
                excluded.append(why)
        if not able:
            raise unavailable(views, features)
        rules: tuple[tuple[Modality, str], ...] = ()
        if ruled := features.modalities & policy.modality_rules.keys():
            able = _ruled(sorted(ruled), able, views, features, policy)
            rules = tuple(sorted(policy.modality_rules.items()))
        strategy = self.strategy(policy.strategy)
        choice = strategy.choose(RouteRequest(features, able, views, policy, snapshot))
        # Why a tier was not a candidate (down, breaker, size); the rule says it itself.
        left_out = () if strategy.name == "rule" else tuple(excluded)
        tier, *fallbacks = choice.order
        if policy.fallbacks:  # the policy's own order, of the tiers able to take the request now
            fallbacks = [f for f in policy.fallbacks if f != tier and f in fallbacks]
        reason = Reason(tier, choice.cause, rules, left_out)
        return Decision(tier, tuple(fallbacks), reason, strategy.name, snapshot)


def _pinned(name: str, views: Sequence[TierView], features: Features, snapshot: Snapshot) -> Decision:
    """The client named a tier: use it or say why not; never move the request elsewhere."""
    for view in views:
        if view.name == name:
            if why_not(view, features) is not None:
                raise unavailable([view], features)
            return Decision(name, (), Reason(name, PINNED), PINNED_STRATEGY, snapshot)
    raise NoTierAvailable(f"{name} is not configured")


def _ruled(
    ruled: list[Modality],
    able: list[TierView],
    views: Sequence[TierView],
    features: Features,
    policy: TenantPolicy,
) -> list[TierView]:
    """The able tiers the policy's modality rules leave for a request carrying ``ruled``."""
    for modality in ruled:
        tier = policy.modality_rules[modality]
        kept = [v for v in able if v.name == tier]
        if not kept:
            said = f"the tenant's policy sends {modality.value} to {tier}"
            view = next((v for v in views if v.name == tier), None)
            if view is None:
                raise RequestDoesNotFit(f"{said}, which is not configured")
            if never := cannot_take(view, features):
                raise RequestDoesNotFit(f"{said}, and {never}")
            raise NoTierAvailable(f"{said}, and {why_not(view, features)}")
        able = kept
    return able
