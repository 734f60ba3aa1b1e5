"""Routing strategies: one small interface, chosen by name per tenant policy; none keeps state.

Every strategy gets the same :class:`RouteRequest` (the tiers that can take the request now,
already filtered by capabilities, health, breakers and the policy's modality rules, and the
learner's snapshot: a prediction for each tier, the exploration draw, the round-robin turn,
the tenant's spend) and returns a :class:`Choice`: the tiers in the order to try them, and
why.  So the baselines run through the same code as the learned router, and a benchmark
compares like with like.

    learned        cheapest predicted cost that meets the latency objective and quality; else
                   the tier most likely to; explores a tier that has served nothing lately
    always:<tier>  that tier when it can, else the rest (``always-edge``, ``always-cloud``: older names)
    round-robin    the able tiers in turn
    rule           the size rule (router.AutoRule): small requests to the small model, the rest
                   to the large one, by the tiers' declared quality
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from router._decision import AutoRule, TierView, why_not
from router._features import Features
from router._learning.predictor import Prediction
from router._policy import ALWAYS, TenantPolicy
from router._reason import (
    Acceptance,
    AlwaysTier,
    BudgetSpent,
    Cause,
    Closest,
    Cost,
    Exploring,
    LatencyCheck,
    MeetsPolicy,
    Overruled,
    Size,
    Turn,
    Unable,
    budget_spent,
)
from router._snapshot import Snapshot


class BudgetExhausted(Exception):
    """The tenant's budget for the period is spent and its policy says to refuse."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class RouteRequest:
    features: Features
    able: Sequence[TierView]  # in configured order; never empty
    views: Sequence[TierView]
    policy: TenantPolicy
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class Choice:
    order: tuple[str, ...]  # the tier to use, then its fallbacks
    cause: Cause


class Strategy(ABC):
    name: str

    @abstractmethod
    def choose(self, request: RouteRequest) -> Choice: ...


def _names(views: Sequence[TierView]) -> tuple[str, ...]:
    return tuple(v.name for v in views)


class Always(Strategy):
    def __init__(self, tier: str) -> None:
        self.tier = tier
        self.name = ALWAYS + tier

    def choose(self, request: RouteRequest) -> Choice:
        names = _names(request.able)
        if self.tier in names:
            return Choice((self.tier, *(n for n in names if n != self.tier)), AlwaysTier(self.tier))
        return Choice(names, AlwaysTier(self.tier, served=False))


class RoundRobin(Strategy):
    name = "round-robin"

    def choose(self, request: RouteRequest) -> Choice:
        names = _names(request.able)
        i = request.snapshot.turn % len(names)
        return Choice(names[i:] + names[:i], Turn())


class Rule(Strategy):
    name = "rule"

    def __init__(self, rule: AutoRule) -> None:
        self._rule = rule

    def choose(self, request: RouteRequest) -> Choice:
        features, rule = request.features, self._rule
        size = Size(
            features.prompt_tokens,
            rule.edge_max_prompt_tokens,
            features.max_tokens,
            rule.edge_max_output_tokens,
        )
        # The rule explains unavailable tiers itself, so it sees them all, unless a modality rule
        # of the policy narrowed the candidates.
        ruled = features.modalities & request.policy.modality_rules.keys()
        views = request.able if ruled else request.views
        ranked = sorted(views, key=lambda v: v.capabilities.quality)  # of equals, the first configured
        if not size.small:
            ranked.reverse()
        able = {v.name for v in request.able}
        order = tuple(v.name for v in ranked if v.name in able)
        first = ranked[0]
        if first.name in able:
            return Choice(order, size)
        why = why_not(first, features)
        assert why is not None  # it is not able
        return Choice(order, Unable(why))  # say why the tier of choice cannot, and use one that can


class Learned(Strategy):
    """The cheapest tier predicted to meet the tenant's objective and quality need."""

    name = "learned"

    def choose(self, request: RouteRequest) -> Choice:
        policy, snapshot = request.policy, request.snapshot
        predictions = snapshot.predictions
        able = list(request.able)
        dearest = max(able, key=lambda v: predictions[v.name].cost_usd)
        top = predictions[dearest.name].cost_usd

        def cost(view: TierView) -> Cost:
            usd = predictions[view.name].cost_usd
            if view is dearest or top <= 0:
                return Cost(usd)
            return Cost(usd, usd / top, dearest.name)

        spend, budget = snapshot.spend, policy.budget
        if spend is not None and budget.amount_usd > 0 and spend.spent_usd >= budget.amount_usd:
            if budget.on_exhausted == "refuse":
                spent = budget_spent(spend.spent_usd, budget.amount_usd, budget.period)
                raise BudgetExhausted(f"the tenant's {spent}", spend.seconds_left)
            ranked = sorted(able, key=lambda v: predictions[v.name].cost_usd)
            used = BudgetSpent(spend.spent_usd, budget.amount_usd, budget.period, cost(ranked[0]))
            return Choice(_names(ranked), used)

        need = max(policy.quality_floor, snapshot.difficulty or 0.0)
        floor, acceptable = policy.acceptable_floor, snapshot.acceptable

        def acceptance(view: TierView) -> Acceptance | None:
            """The tier's learned acceptability, once trusted for this request (else None)."""
            a = acceptable.get(view.name)
            return Acceptance(a.mean, floor, a.labels, a.shared) if a is not None and a.learned else None

        latency = policy.latency
        scored = []
        # Tiers the declared check would take but a learned acceptability below the floor leaves out.
        overruled: dict[str, Overruled] = {}
        short_of_difficulty = False  # a tier judged on its declared quality fell short of the need
        for view in able:
            p = predictions[view.name]
            checks = []
            for target, bound in (("ttft", latency.ttft_ms), ("total", latency.total_ms)):
                if bound is None:
                    continue
                # A client that does not stream sees its first byte when the answer is done.
                value = p.at("total" if not request.features.stream else target, latency.percentile)
                checks.append(LatencyCheck(target, latency.percentile, value, bound))
            ratio = max((c.ratio for c in checks), default=0.0)
            # Learned from labels, the acceptability against the floor; else, declared.
            learned = acceptance(view)
            declared = max(0.0, need - view.capabilities.quality)
            shortfall = max(0.0, floor - learned.mean) if learned is not None else declared
            scored.append((view, ratio, shortfall, tuple(checks)))
            if learned is not None and shortfall > 0 and declared == 0 and ratio <= 1.0:
                overruled[view.name] = Overruled(view.name, learned)
            elif learned is None and declared > 0:
                short_of_difficulty = True

        shown = snapshot.difficulty if short_of_difficulty else None
        ok = [s for s in scored if s[1] <= 1.0 and s[2] == 0.0]
        cause: Cause
        if ok:
            preferred = next((s for s in ok if s[0].name == policy.preferred_tier), None)
            pick = preferred or min(ok, key=lambda s: predictions[s[0].name].cost_usd)
            rest = sorted((s for s in scored if s is not pick), key=lambda s: (s[2], s[1] > 1, s[1]))
            passed = _passed(overruled, pick[0], predictions, policy.preferred_tier)
            said = acceptance(pick[0])
            cause = MeetsPolicy(pick[3], cost(pick[0]), preferred is not None, shown, said, passed)
        else:
            pick, *rest = sorted(scored, key=lambda s: (s[2], s[1]))
            needed = need if pick[2] > 0 else None
            passed = _passed(overruled, pick[0], predictions, policy.preferred_tier)
            said = acceptance(pick[0])
            cause = Closest(pick[3], cost(pick[0]), needed, pick[1] > 1, shown, said, passed)
        order = [pick[0], *(s[0] for s in rest)]

        if snapshot.explore is not None and len(order) > 1:
            # Only a tier not measured lately (one that serves requests anyway needs no detour), or a
            # cheaper one that may be good enough for requests like this: not learned yet, or learned
            # but its Thompson draw passes the floor.  The evidence that may let it serve them.
            least, unmeasured = policy.quality_floor, snapshot.unmeasured
            dearest_ok = predictions[order[0].name].cost_usd

            def unlearned(view: TierView) -> bool:
                a = acceptable.get(view.name)
                cheaper = predictions[view.name].cost_usd < dearest_ok
                return cheaper and a is not None and (not a.learned or a.draw >= floor)

            others = [
                v
                for v in order[1:]
                if v.capabilities.quality >= least
                and (unmeasured is None or v.name in unmeasured or unlearned(v))
            ]
            if others:
                chosen = others[min(int(snapshot.explore * len(others)), len(others) - 1)]
                order = [chosen, *(v for v in order if v is not chosen)]
                total = predictions[chosen.name].total_p50
                cause = Exploring(snapshot.exploration, total, cost(chosen))
        return Choice(_names(order), cause)


def _passed(
    overruled: Mapping[str, Overruled],
    pick: TierView,
    predictions: Mapping[str, Prediction],
    preferred: str | None,
) -> tuple[Overruled, ...]:
    """Of the tiers a learned acceptability left out, those chosen before ``pick`` but for it: the
    preferred tier, or a cheaper one; cheapest first."""
    top = predictions[pick.name].cost_usd
    chosen_before = (
        o
        for name, o in overruled.items()
        if name != pick.name and (name == preferred or predictions[name].cost_usd < top)
    )
    return tuple(sorted(chosen_before, key=lambda o: predictions[o.tier].cost_usd))
