"""Tenant policies: what a tenant's requests must meet, and how the router chooses for them.

A :class:`TenantPolicy` is a plain value (msgspec, JSON on the wire and in the database):

    strategy        which routing strategy serves the tenant (``learned``, ``always:<tier>``,
                    ``round-robin``, ``rule``; ``always-edge`` and ``always-cloud`` are the
                    older names of ``always:edge`` and ``always:cloud``)
    latency         the objective: time to first token and/or total time, in ms, at a percentile
    budget          spend allowed per period (day, week, month; UTC), and what to do once spent
    tag_budgets     spend allowed per period to the requests carrying one cost tag (``team=search``);
                    once one is spent, a request with that tag is treated as ``budget.on_exhausted`` says
    preferred_tier  taken whenever it meets the objective and the quality floor, even if dearer
    fallbacks       the tiers tried, in this order, when the chosen one fails before its answer
                    begins (a hosted provider's 429, a timeout): only those, and only those able to
                    take the request then; empty: every able tier, in the strategy's order
    quality_floor   the least declared quality level (0..1) a tier's model must have
    acceptable_floor  (learned) the least probability that a tier's answer is acceptable, once the
                    quality model has learned it from the tenant's own labels covering the request
                    (router/_learning/quality.py); until then the declared quality and the difficulty decide
    weigh_difficulty  (learned) whether a tier must also have a quality level of at least the
                    request's estimated difficulty (a strong/weak threshold router); off, only
                    the floor counts, like the other strategies
    modality_rules  a modality → the tier that must serve requests carrying it (``video = cloud``)
    cache           whether the result cache may answer this tenant
    semantic_cache  (off by default) answer a request whose last user turn means the same as a stored
                    one's, in the same context: ``enabled``, ``threshold`` (cosine similarity, (0, 1]),
                    ``allow_tools`` (requests carrying tool results too), ``allow_sampling`` (requests
                    not at temperature 0 without a seed too)
    shadow          (off by default) a sampled share of a cheaper tier's answers asked again of a
                    reference tier in the background and compared: a quality label, billed as shadow
    degrade         when a medium's path is broken everywhere: ``serve`` it text-only, ``fail``
                    (503), or ``default`` (the gateway's setting)
    residency       rules for sensitive data in a request's text: a detector (email, phone, iban,
                    card, national_id, secret, or the tenant's own RE2 ``pattern``) and what its
                    match does: ``keep_local`` (only tiers with location "local" may serve it),
                    ``redact`` (placeholders before a remote tier sees it, put back in the answer),
                    or ``refuse`` (400)

Validation happens twice: msgspec checks types and ranges while decoding (the error names
the field), :func:`check_policy` checks what depends on the gateway (tier and strategy names).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Annotated, Literal

import msgspec
import re2
from msgspec import Meta

from tiers import Modality

# The strategies router._strategies has (named here so a policy can be checked without a router):
# these, and ALWAYS + a tier's name.
FIXED_STRATEGIES = ("learned", "round-robin", "rule")
ALWAYS = "always:"
# Names policies were stored with before tiers were named in configuration.
STRATEGY_ALIASES = {"always-edge": "always:edge", "always-cloud": "always:cloud"}
PERIODS = ("day", "week", "month")

Milliseconds = Annotated[float, Meta(gt=0, le=3_600_000)]
Percentile = Annotated[float, Meta(ge=50, le=99.9)]
Fraction = Annotated[float, Meta(ge=0, le=1)]


class PolicyInvalid(ValueError):
    """A policy that cannot be used; ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class LatencyObjective(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Met when the predicted latency at ``percentile`` is within every bound given (None: no bound)."""

    ttft_ms: Milliseconds | None = None
    total_ms: Milliseconds | None = 60_000.0
    percentile: Percentile = 95.0


class Budget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # USD per period; 0: no budget.
    amount_usd: Annotated[float, Meta(ge=0)] = 0.0
    period: Literal["day", "week", "month"] = "month"
    # Once spent: route every request to the cheapest tier that can take it, or refuse (429).
    on_exhausted: Literal["cheapest", "refuse"] = "cheapest"


Detector = Literal["email", "phone", "iban", "card", "national_id", "secret", "pattern"]
ResidencyAction = Literal["keep_local", "redact", "refuse"]
# When several rules match, the strictest action decides.
ACTION_ORDER: dict[str, int] = {"redact": 0, "keep_local": 1, "refuse": 2}


class ResidencyRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    detector: Detector
    action: ResidencyAction
    pattern: Annotated[str, Meta(min_length=1, max_length=512)] | None = (
        None  # RE2 syntax, detector "pattern"
    )
    # Named in route reasons, the ledger, metrics and errors; default: the detector's name.
    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = None

    @property
    def label(self) -> str:
        return self.name or self.detector


# A cost tag, key=value (the ledger's tag rules: gateway/accounts/ledger/_tags.py).
TagText = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.:/-]{1,64}=[^,\x00-\x1f\x7f]{1,128}$")]


class TagBudget(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Spend allowed per period to the tenant's requests that carry ``tag``."""

    tag: TagText
    amount_usd: Annotated[float, Meta(gt=0)]
    period: Literal["day", "week", "month"] = "month"

    @property
    def pair(self) -> tuple[str, str]:
        key, _, value = self.tag.partition("=")
        return key, value


class SemanticCachePolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """When a paraphrase of a stored request may get its answer (gateway/pipeline/answers/semantic/)."""

    enabled: bool = False
    # The least cosine similarity of the two last user turns (all-MiniLM-L6-v2); chosen on half of
    # tests/data/semantic_pairs.tsv (docs/cache.md has the rates it gives).
    threshold: Annotated[float, Meta(gt=0, le=1)] = 0.85
    allow_tools: bool = False  # also requests carrying tool results (role "tool")
    allow_sampling: bool = False  # also requests sampled at temperature > 0 without a seed


class ShadowPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Shadow comparisons (gateway/accounts/quality/shadow.py): a sample of the answers a cheaper tier
    gave is asked again of ``reference`` in the background, and the two compared; the result is a
    quality label."""

    enabled: bool = False
    rate: Fraction = 0.05  # the share of answers (of tiers other than the reference) shadowed
    budget_usd: Annotated[float, Meta(ge=0)] = 1.0  # per UTC day, at most (checked at the worst case)
    reference: str | None = None  # the tier asked again; None: the one of highest declared quality
    threshold: Annotated[float, Meta(gt=0, le=1)] = 0.6  # least similarity of two prose answers to agree


class TenantPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    strategy: str = "learned"
    latency: LatencyObjective = msgspec.field(default_factory=LatencyObjective)
    budget: Budget = msgspec.field(default_factory=Budget)
    tag_budgets: Annotated[tuple[TagBudget, ...], Meta(max_length=16)] = ()
    preferred_tier: str | None = None
    fallbacks: Annotated[tuple[str, ...], Meta(max_length=16)] = ()
    quality_floor: Fraction = 0.0
    acceptable_floor: Fraction = 0.7
    weigh_difficulty: bool = True
    modality_rules: dict[Modality, str] = msgspec.field(default_factory=dict)
    cache: bool = True
    semantic_cache: SemanticCachePolicy = msgspec.field(default_factory=SemanticCachePolicy)
    degrade: Literal["default", "serve", "fail"] = "default"
    residency: Annotated[list[ResidencyRule], Meta(max_length=32)] = msgspec.field(default_factory=list)
    shadow: ShadowPolicy = msgspec.field(default_factory=ShadowPolicy)

    @property
    def fail_instead_of_degrade(self) -> bool | None:
        return {"default": None, "serve": False, "fail": True}[self.degrade]


DEFAULT_POLICY = TenantPolicy()


def canonical_strategy(name: str) -> str:
    """A strategy's name, older names (``always-edge``) replaced by their current one."""
    return STRATEGY_ALIASES.get(name, name)


def always_tier(strategy: str) -> str | None:
    """The tier an ``always:<tier>`` strategy (or an older name of one) sends to, else None."""
    name = canonical_strategy(strategy)
    return name[len(ALWAYS) :] if name.startswith(ALWAYS) else None


def strategy_names(tiers: Iterable[str]) -> tuple[str, ...]:
    """Every strategy a policy may name on a gateway with ``tiers``."""
    learned, *rest = FIXED_STRATEGIES
    return (learned, *(ALWAYS + t for t in tiers), *rest)


_decoder = msgspec.json.Decoder(TenantPolicy)


def _field_of(error: msgspec.ValidationError) -> str:
    """``... - at `$.latency.total_ms``` → ``latency.total_ms`` (also ``at `key` in `$.x```)."""
    text = str(error)
    if "`$" in text:
        path = text.rsplit("`$", 1)[1].split("`", 1)[0]
        return path.lstrip(".").replace("[", ".").replace("]", "").replace("'", "").replace('"', "")
    if "Object contains unknown field `" in text:
        return text.split("`")[1]
    return ""


def decode_policy(body: bytes | str) -> TenantPolicy:
    """A policy from JSON; missing fields take their defaults. Raises :class:`PolicyInvalid`."""
    try:
        return _decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise PolicyInvalid(_field_of(exc), f"invalid policy: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise PolicyInvalid("", f"invalid policy: malformed JSON: {exc}") from exc


def check_policy(policy: TenantPolicy, tiers: Collection[str]) -> TenantPolicy:
    """Check the names a policy uses against this gateway's tiers and strategies (the older names
    ``always-edge`` and ``always-cloud`` pass whatever the tiers, as they always have: a tier
    they name that is missing cannot take the request, and the reason says so)."""
    known = policy.strategy in FIXED_STRATEGIES or policy.strategy in STRATEGY_ALIASES  # as ever
    if not known and always_tier(policy.strategy) not in tiers:
        names = ", ".join(strategy_names(sorted(tiers)))
        raise PolicyInvalid("strategy", f"unknown strategy {policy.strategy!r}; use one of {names}")
    if policy.preferred_tier is not None and policy.preferred_tier not in tiers:
        raise PolicyInvalid(
            "preferred_tier", f"no tier named {policy.preferred_tier!r}; tiers: {', '.join(sorted(tiers))}"
        )
    for i, tier in enumerate(policy.fallbacks):
        if tier not in tiers:
            raise PolicyInvalid(
                f"fallbacks.{i}", f"no tier named {tier!r}; tiers: {', '.join(sorted(tiers))}"
            )
    if len(set(policy.fallbacks)) != len(policy.fallbacks):
        raise PolicyInvalid("fallbacks", "fallbacks names a tier twice")
    tags = [b.tag for b in policy.tag_budgets]
    if len(set(tags)) != len(tags):
        raise PolicyInvalid("tag_budgets", "tag_budgets names a tag twice")
    for modality, tier in policy.modality_rules.items():
        if tier not in tiers:
            raise PolicyInvalid(
                f"modality_rules.{modality.value}",
                f"no tier named {tier!r}; tiers: {', '.join(sorted(tiers))}",
            )
    reference = policy.shadow.reference
    if reference is not None and reference not in tiers:
        raise PolicyInvalid(
            "shadow.reference", f"no tier named {reference!r}; tiers: {', '.join(sorted(tiers))}"
        )
    for i, rule in enumerate(policy.residency):
        _check_rule(rule, f"residency.{i}")
    return policy


def _check_rule(rule: ResidencyRule, where: str) -> None:
    if (rule.detector == "pattern") != (rule.pattern is not None):
        raise PolicyInvalid(f"{where}.pattern", "a pattern goes with detector 'pattern', and only with it")
    if rule.pattern is not None:
        try:
            re2.compile(rule.pattern)
        except re2.error as exc:
            raise PolicyInvalid(f"{where}.pattern", f"not an RE2 pattern: {exc}") from exc
