"""Why a request went where it did, as values: a :class:`Reason` has a :class:`Kind` and the
figures behind it, and renders the ``X-Tiergate-Route-Reason`` text from them.  Nothing reads
the text back: metrics take :attr:`Reason.kind`.

    Reason            the tier chosen, its cause, and what else shaped the choice
    ├── cause         one of the causes below (its ``kind`` is the reason's)
    ├── modality_rules  the tenant's modality rules, when the request carries a ruled modality
    ├── left_out      why each tier that was not a candidate could not take the request
    ├── removed       media the gateway removed because their path is broken on every tier
    └── failover      the tier that served instead, and why the one before it did not

An :data:`Exclusion` says why one tier cannot take a request (now, or ever); it is also the
cause when the rule's tier of choice cannot take it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

from router._exclusions import (
    BreakerOpen,
    CapabilityExclusion,
    ContextTooSmall,
    Exclusion,
    KeptLocal,
    Lacks,
    NotAccepted,
    NotConfigured,
    NotReady,
    OverMediaLimit,
)
from router._kinds import Kind
from tiers import Modality

__all__ = [
    "BreakerOpen",
    "CapabilityExclusion",
    "ContextTooSmall",
    "Exclusion",
    "KeptLocal",
    "Kind",
    "Lacks",
    "NotAccepted",
    "NotConfigured",
    "NotReady",
    "OverMediaLimit",
]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms"


# -- the causes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pinned:
    kind: ClassVar[Kind] = Kind.PINNED

    def __str__(self) -> str:
        return "pinned by model name"


@dataclass(frozen=True, slots=True)
class Size:
    """The rule's measure of a request: small when both its prompt and its max_tokens are within
    the rule's bounds (a request without max_tokens is not small)."""

    prompt_tokens: int
    max_prompt_tokens: int
    max_tokens: int | None
    max_output_tokens: int
    kind: ClassVar[Kind] = Kind.SIZE

    @property
    def small(self) -> bool:
        return self.prompt_tokens <= self.max_prompt_tokens and (
            self.max_tokens is not None and self.max_tokens <= self.max_output_tokens
        )

    def __str__(self) -> str:
        if self.small:
            return (
                f"prompt ~{self.prompt_tokens} <= {self.max_prompt_tokens} tokens, "
                f"max_tokens {self.max_tokens} <= {self.max_output_tokens}"
            )
        if self.prompt_tokens > self.max_prompt_tokens:
            return f"prompt ~{self.prompt_tokens} > {self.max_prompt_tokens} tokens"
        if self.max_tokens is None:
            return "max_tokens not set"
        return f"max_tokens {self.max_tokens} > {self.max_output_tokens}"


@dataclass(frozen=True, slots=True)
class Unable:
    """The tier the rule chose cannot take the request: another serves it."""

    why: Exclusion

    @property
    def kind(self) -> Kind:
        return self.why.kind

    def __str__(self) -> str:
        return str(self.why)


@dataclass(frozen=True, slots=True)
class AlwaysTier:
    """The tenant's strategy always sends to ``tier``; ``served``: whether it could."""

    tier: str
    served: bool = True

    @property
    def kind(self) -> Kind:
        return Kind.POLICY if self.served else Kind.TIER_UNAVAILABLE

    def __str__(self) -> str:
        said = f"always-{self.tier} strategy"
        return said if self.served else f"{said}, but {self.tier} cannot take it"


@dataclass(frozen=True, slots=True)
class Turn:
    kind: ClassVar[Kind] = Kind.ROUND_ROBIN

    def __str__(self) -> str:
        return "round-robin"


@dataclass(frozen=True, slots=True)
class Cost:
    """A tier's predicted cost: in USD, or (``ratio``) as a share of the dearest tier's."""

    usd: float
    ratio: float | None = None
    dearest: str = ""

    def __str__(self) -> str:
        if self.ratio is None:
            return f"cost ${self.usd:.6f}"
        return f"cost {self.ratio:.2g}x {self.dearest}"


@dataclass(frozen=True, slots=True)
class LatencyCheck:
    """One bound of the latency objective against a tier's prediction at the objective's percentile."""

    target: str  # ttft | total: the bound (a client that does not stream is judged on the total)
    percentile: float
    predicted_s: float
    bound_ms: float

    @property
    def ratio(self) -> float:
        return self.predicted_s * 1000 / self.bound_ms

    def __str__(self) -> str:
        sign = "<" if self.predicted_s * 1000 <= self.bound_ms else ">"
        label = "ttft " if self.target == "ttft" else ""
        return f"p{self.percentile:g} {label}predicted {_ms(self.predicted_s)} {sign} slo {self.bound_ms:g}ms"


def _checks(checks: tuple[LatencyCheck, ...]) -> str:
    return "; ".join(str(c) for c in checks) or "no latency objective"


def _difficulty(difficulty: float | None) -> str:
    return "" if difficulty is None else f"; difficulty {difficulty:.2f}"


def budget_spent(spent_usd: float, amount_usd: float, period: str) -> str:
    return f"budget spent (${spent_usd:.4f} of ${amount_usd:g} this {period})"


@dataclass(frozen=True, slots=True)
class BudgetSpent:
    spent_usd: float
    amount_usd: float
    period: str
    cost: Cost
    kind: ClassVar[Kind] = Kind.BUDGET

    def __str__(self) -> str:
        return f"{budget_spent(self.spent_usd, self.amount_usd, self.period)}: cheapest, {self.cost}"


@dataclass(frozen=True, slots=True)
class Acceptance:
    """The learned probability that a tier's answer is acceptable, against the tenant's
    ``acceptable_floor``, and the labels behind it: the tenant's own for the tier (learned figures
    need at least ``min_labels`` of them) and other tenants' in the shared prior (at most
    ``shared_labels`` each).  ``draw``: the Thompson draw that decided, shown when it falls on the
    other side of the floor than the mean (the router is exploring)."""

    mean: float
    floor: float
    labels: int
    shared: int = 0
    draw: float | None = None

    def __str__(self) -> str:
        sign = ">=" if self.mean >= self.floor else "<"
        said = (
            f"acceptable {self.mean:.2f} {sign} floor {self.floor:g} "
            f"({self.labels} own labels, {self.shared} shared)"
        )
        if self.draw is not None and (self.draw >= self.floor) != (self.mean >= self.floor):
            said += f", drawn {self.draw:.2f}"
        return said


@dataclass(frozen=True, slots=True)
class Overruled:
    """A tier that meets the policy on its declared quality and would have been chosen before the
    one that was, left out because its learned acceptability for the request is below the floor."""

    tier: str
    acceptance: Acceptance

    def __str__(self) -> str:
        return f"{self.tier} not taken: {self.acceptance}"


def _learned(acceptance: Acceptance | None, overruled: tuple[Overruled, ...], said: str) -> str:
    """``said``, after the chosen tier's learned acceptability and the tiers what was learned left out."""
    parts = ([] if acceptance is None else [str(acceptance)]) + [str(o) for o in overruled]
    return "; ".join([*parts, said])


@dataclass(frozen=True, slots=True)
class MeetsPolicy:
    """The tier meets the objective and the quality needed: the preferred tier, else the cheapest.
    ``difficulty``: shown when some tier fell short of it."""

    checks: tuple[LatencyCheck, ...]
    cost: Cost
    preferred: bool = False
    difficulty: float | None = None
    acceptance: Acceptance | None = None  # the tier's learned acceptability, once it is trusted
    overruled: tuple[Overruled, ...] = ()  # tiers chosen before it but for what was learned

    @property
    def kind(self) -> Kind:
        return Kind.PREFERRED if self.preferred else Kind.SLO if self.checks else Kind.POLICY

    def __str__(self) -> str:
        why = "preferred tier" if self.preferred else "cheapest that meets the policy"
        said = f"{_checks(self.checks)}, {self.cost} ({why}){_difficulty(self.difficulty)}"
        return _learned(self.acceptance, self.overruled, said)


@dataclass(frozen=True, slots=True)
class Closest:
    """No tier meets the policy: the one most likely to.  ``quality_needed``: set when it falls
    short of the quality needed; ``objective_missed``: when it is predicted to miss the objective."""

    checks: tuple[LatencyCheck, ...]
    cost: Cost
    quality_needed: float | None = None
    objective_missed: bool = False
    difficulty: float | None = None
    acceptance: Acceptance | None = None  # the tier's learned acceptability, once it is trusted
    overruled: tuple[Overruled, ...] = ()  # tiers chosen before it but for what was learned

    @property
    def kind(self) -> Kind:
        if self.quality_needed is not None and not self.objective_missed:
            return Kind.QUALITY_UNMET
        return Kind.SLO_UNMET

    def __str__(self) -> str:
        what = []
        if self.quality_needed is not None:
            what.append(f"no tier has quality >= {self.quality_needed:.2f}")
        if self.objective_missed:
            what.append("no tier is predicted to meet the objective")
        unmet = " and ".join(what) or "none meets the policy"
        said = f"{_checks(self.checks)}; {unmet}, most likely to meet it, {self.cost}"
        said += _difficulty(self.difficulty)
        return _learned(self.acceptance, self.overruled, said)


@dataclass(frozen=True, slots=True)
class Exploring:
    share: float  # of learned-strategy requests explored
    total_p50_s: float
    cost: Cost
    kind: ClassVar[Kind] = Kind.EXPLORATION

    def __str__(self) -> str:
        return (
            f"exploring ({self.share:.0%} of requests keep every tier measured): "
            f"p50 predicted {_ms(self.total_p50_s)}, {self.cost}"
        )


Cause = Pinned | Size | Unable | AlwaysTier | Turn | BudgetSpent | MeetsPolicy | Closest | Exploring
PINNED = Pinned()


# -- the reason ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Failover:
    tier: str  # the tier that served
    error: str  # why the one before it did not


@dataclass(frozen=True, slots=True)
class Reason:
    tier: str
    cause: Cause
    modality_rules: tuple[tuple[Modality, str], ...] = ()
    left_out: tuple[Exclusion, ...] = ()
    removed: tuple[Modality, ...] = ()
    failover: Failover | None = None

    @property
    def kind(self) -> Kind:
        return Kind.FAILOVER if self.failover is not None else self.cause.kind

    def removing(self, modalities: Iterable[Modality]) -> Reason:
        """This reason, saying the gateway removed ``modalities`` (their breakers are open everywhere)."""
        return dataclasses.replace(self, removed=tuple(sorted(modalities)))

    def failed_over(self, tier: str, error: str) -> Reason:
        """This reason, saying ``tier`` served because the tier before it failed with ``error``."""
        return dataclasses.replace(self, failover=Failover(tier, error))

    def render(self) -> str:
        """The ``X-Tiergate-Route-Reason`` text."""
        if self.failover is not None:
            return f"{self.failover.tier}: {self.failover.error}, failed over"
        text = f"{self.tier}: {self.cause}"
        if self.modality_rules:
            text += f" (policy sends {', '.join(f'{m.value} to {t}' for m, t in self.modality_rules)})"
        if self.left_out:
            text += "; " + "; ".join(str(e) for e in self.left_out)
        if self.removed:
            text += f"; {', '.join(m.value for m in self.removed)} removed: breaker open"
        return text

    __str__ = render
