"""Why a tier cannot take a request (now, or ever), as values: each has the :class:`Kind` it stands
for in metrics and renders its part of the ``X-Tiergate-Route-Reason`` text."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from router._kinds import Kind, names
from tiers import Ability, Health, Modality


@dataclass(frozen=True, slots=True)
class NotAccepted:
    tier: str
    modalities: frozenset[Modality]
    kind: ClassVar[Kind] = Kind.CAPABILITY

    def __str__(self) -> str:
        return f"{self.tier} does not accept {names(self.modalities)}"


@dataclass(frozen=True, slots=True)
class Lacks:
    """The request asks for something the tier cannot do (tools, a response format, logprobs, n)."""

    tier: str
    abilities: frozenset[Ability]
    kind: ClassVar[Kind] = Kind.CAPABILITY

    def __str__(self) -> str:
        return f"{self.tier} cannot honour {', '.join(sorted(a.value for a in self.abilities))}"


@dataclass(frozen=True, slots=True)
class OverMediaLimit:
    """The request carries more of a medium than the tier takes: images (a count), image_pixels
    (per image; ``has`` unused), video or audio (seconds)."""

    tier: str
    medium: str
    limit: int | float
    has: int | float = 0
    kind: ClassVar[Kind] = Kind.CAPABILITY

    def __str__(self) -> str:
        if self.medium == "images":
            return f"{self.tier} takes at most {self.limit} images, the request has {self.has}"
        if self.medium == "image_pixels":
            return f"{self.tier} takes images of at most {self.limit} pixels"
        return (
            f"{self.tier} takes at most {self.limit:g} s of {self.medium}, the request has {self.has:.1f} s"
        )


@dataclass(frozen=True, slots=True)
class ContextTooSmall:
    tier: str
    context_tokens: int
    needed_tokens: int
    kind: ClassVar[Kind] = Kind.CAPABILITY

    def __str__(self) -> str:
        return f"{self.tier} context is {self.context_tokens} tokens, the request needs ~{self.needed_tokens}"


@dataclass(frozen=True, slots=True)
class NotReady:
    tier: str
    health: Health
    kind: ClassVar[Kind] = Kind.TIER_UNAVAILABLE

    def __str__(self) -> str:
        return f"{self.tier} is {self.health.value}"


@dataclass(frozen=True, slots=True)
class BreakerOpen:
    tier: str
    modalities: frozenset[Modality]
    kind: ClassVar[Kind] = Kind.BREAKER_OPEN

    def __str__(self) -> str:
        return f"{self.tier} {names(self.modalities)} breaker is open"


@dataclass(frozen=True, slots=True)
class NotConfigured:
    tier: str
    kind: ClassVar[Kind] = Kind.TIER_UNAVAILABLE

    def __str__(self) -> str:
        return f"{self.tier} is not configured"


@dataclass(frozen=True, slots=True)
class KeptLocal:  # a residency rule keeps the request on tiers marked local; this one is remote
    tier: str
    rule: str  # the rule that decided, e.g. "iban"
    kind: ClassVar[Kind] = Kind.CAPABILITY

    def __str__(self) -> str:
        return f"{self.tier} is remote and residency rule {self.rule!r} keeps this request local"


CapabilityExclusion = NotAccepted | Lacks | OverMediaLimit | ContextTooSmall | KeptLocal
Exclusion = CapabilityExclusion | NotReady | BreakerOpen | NotConfigured
