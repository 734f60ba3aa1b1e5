"""Routing strategies: one small interface, a registry by name, chosen per tenant policy.

Every strategy gets the same :class:`RouteRequest` (the tiers that can take the request now,
already filtered by capabilities, health, breakers and the policy's modality rules, with a
prediction for each) and returns a :class:`Decision`.  So the baselines run through the
same code as the learned router, and a benchmark compares like with like.

    learned        cheapest predicted cost that meets the latency objective and quality; else
                   the tier most likely to; explores a tier that has served nothing lately
    always-edge    the edge when it can, else the rest
    always-cloud   the cloud when it can, else the rest
    round-robin    the able tiers in turn
    rule           the size rule (router.AutoRule) that came before the learned router
"""

from __future__ import annotations

import itertools
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from router._decision import CLOUD, EDGE, AutoRule, Decision, TierView, auto
from router._features import Features
from router._policy import TenantPolicy
from router._predictor import Prediction


class BudgetExhausted(Exception):
    """The tenant's budget for the period is spent and its policy says to refuse."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True, slots=True)
class Spend:
    """The tenant's spend in the policy's current period (from the ledger)."""

    spent_usd: float
    seconds_left: float  # until the period ends


@dataclass(frozen=True, slots=True)
class RouteRequest:
    features: Features
    able: Sequence[TierView]  # in configured order; never empty
    views: Sequence[TierView]
    policy: TenantPolicy
    predictions: Mapping[str, Prediction]
    difficulty: float | None
    spend: Spend | None
    # Able tiers that served none of the last requests routed (None: not known, all may be explored).
    unmeasured: frozenset[str] | None = None


class Strategy(ABC):
    name: ClassVar[str]

    @abstractmethod
    def choose(self, request: RouteRequest) -> Decision: ...


def _ordered(first: str, request: RouteRequest, why: str) -> Decision:
    names = [v.name for v in request.able]
    if first in names:
        return Decision(first, tuple(n for n in names if n != first), f"{first}: {why}")
    chosen, *rest = names
    return Decision(chosen, tuple(rest), f"{chosen}: {why}, but {first} cannot take it")


class AlwaysEdge(Strategy):
    name = "always-edge"

    def choose(self, request: RouteRequest) -> Decision:
        return _ordered(EDGE, request, "always-edge strategy")


class AlwaysCloud(Strategy):
    name = "always-cloud"

    def choose(self, request: RouteRequest) -> Decision:
        return _ordered(CLOUD, request, "always-cloud strategy")


class RoundRobin(Strategy):
    name = "round-robin"

    def __init__(self) -> None:
        self._turn = itertools.count()

    def choose(self, request: RouteRequest) -> Decision:
        names = [v.name for v in request.able]
        i = next(self._turn) % len(names)
        order = names[i:] + names[:i]
        return Decision(order[0], tuple(order[1:]), f"{order[0]}: round-robin")


class Rule(Strategy):
    name = "rule"

    def __init__(self, rule: AutoRule) -> None:
        self._rule = rule

    def choose(self, request: RouteRequest) -> Decision:
        # The rule explains unavailable tiers itself, so it sees them all, unless a modality rule
        # of the policy narrowed the candidates.
        ruled = request.features.modalities & request.policy.modality_rules.keys()
        return auto(self._rule, request.able if ruled else request.views, request.features)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms"


class Learned(Strategy):
    """The cheapest tier predicted to meet the tenant's objective and quality need."""

    name = "learned"

    def __init__(self, exploration: float, rng: random.Random) -> None:
        self._exploration = exploration
        self._rng = rng

    def choose(self, request: RouteRequest) -> Decision:
        policy, predictions = request.policy, request.predictions
        able = list(request.able)
        most = max(able, key=lambda v: predictions[v.name].cost_usd)

        def cost_text(name: str) -> str:
            top = predictions[most.name].cost_usd
            if name == most.name or top <= 0:
                return f"cost ${predictions[name].cost_usd:.6f}"
            return f"cost {predictions[name].cost_usd / top:.2g}x {most.name}"

        spend = request.spend
        budget = policy.budget
        if spend is not None and budget.amount_usd > 0 and spend.spent_usd >= budget.amount_usd:
            spent = f"budget spent (${spend.spent_usd:.4f} of ${budget.amount_usd:g} this {budget.period})"
            if budget.on_exhausted == "refuse":
                raise BudgetExhausted(f"the tenant's {spent}", spend.seconds_left)
            ranked = sorted(able, key=lambda v: predictions[v.name].cost_usd)
            return self._decision(ranked, f"{spent}: cheapest, {cost_text(ranked[0].name)}", request)

        need = max(policy.quality_floor, request.difficulty or 0.0)
        latency = policy.latency
        pct = latency.percentile
        scored = []
        for view in able:
            p = predictions[view.name]
            ratios, texts = [], []
            for target, bound in (("ttft", latency.ttft_ms), ("total", latency.total_ms)):
                if bound is None:
                    continue
                # A client that does not stream sees its first byte when the answer is done.
                value = p.at("total" if not request.features.stream else target, pct)
                ratios.append(value * 1000 / bound)
                sign = "<" if value * 1000 <= bound else ">"
                label = "ttft " if target == "ttft" else ""
                texts.append(f"p{pct:g} {label}predicted {_ms(value)} {sign} slo {bound:g}ms")
            shortfall = max(0.0, need - view.capabilities.quality)
            scored.append((view, max(ratios, default=0.0), shortfall, "; ".join(texts)))

        ok = [s for s in scored if s[1] <= 1.0 and s[2] == 0.0]
        if ok:
            preferred = next((s for s in ok if s[0].name == policy.preferred_tier), None)
            if preferred is not None:
                pick, why = preferred, "preferred tier"
            else:
                pick = min(ok, key=lambda s: predictions[s[0].name].cost_usd)
                why = "cheapest that meets the policy"
            rest = sorted((s for s in scored if s is not pick), key=lambda s: (s[2], s[1] > 1, s[1]))
            reason = f"{pick[3] or 'no latency objective'}, {cost_text(pick[0].name)} ({why})"
        else:
            closest = sorted(scored, key=lambda s: (s[2], s[1]))
            pick, rest = closest[0], closest[1:]
            what = []
            if pick[2] > 0:
                what.append(f"no tier has quality >= {need:.2f}")
            if pick[1] > 1:
                what.append("no tier is predicted to meet the objective")
            reason = f"{pick[3] or 'no latency objective'}; {' and '.join(what) or 'none meets the policy'}, "
            reason += f"most likely to meet it, {cost_text(pick[0].name)}"
        if request.difficulty is not None and any(s[2] > 0 for s in scored):
            reason += f"; difficulty {request.difficulty:.2f}"
        order = [pick[0], *(s[0] for s in rest)]

        if self._exploration > 0 and len(order) > 1 and self._rng.random() < self._exploration:
            # Only a tier not measured lately: one that serves requests anyway needs no detour.
            floor, unmeasured = policy.quality_floor, request.unmeasured
            others = [
                v
                for v in order[1:]
                if v.capabilities.quality >= floor and (unmeasured is None or v.name in unmeasured)
            ]
            if others:
                chosen = self._rng.choice(others)
                order = [chosen, *(v for v in order if v is not chosen)]
                p = predictions[chosen.name]
                reason = (
                    f"exploring ({self._exploration:.0%} of requests keep every tier measured): "
                    f"p50 predicted {_ms(p.total_p50)}, {cost_text(chosen.name)}"
                )
        return self._decision(order, reason, request)

    @staticmethod
    def _decision(order: Sequence[TierView], reason: str, request: RouteRequest) -> Decision:
        return Decision(order[0].name, tuple(v.name for v in order[1:]), f"{order[0].name}: {reason}")


STRATEGY_NAMES = ("learned", "always-edge", "always-cloud", "round-robin", "rule")


def strategies(rule: AutoRule, exploration: float, rng: random.Random) -> dict[str, Strategy]:
    """One instance of every strategy, by name."""
    made: list[Strategy] = [Learned(exploration, rng), AlwaysEdge(), AlwaysCloud(), RoundRobin(), Rule(rule)]
    return {s.name: s for s in made}
