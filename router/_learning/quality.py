"""How likely a tier's answer is to be acceptable for a request, learned from outcomes.

A tier's declared ``quality`` (edge 0.4, cloud 0.7) and the template-trained difficulty say nothing
about *this* deployment's requests.  This model learns it from labels: a client's feedback, a re-ask,
a stream abandoned early, a structured answer cut at ``max_tokens``, a tool call to no offered tool.

The model is a Bayesian probit regression per tier (AdPredictor's assumed-density filtering: one pass
per label, a mean and a variance per weight, no refits), over the request's hashed words (the
difficulty model's words, without its word pairs) and numbers (:func:`vectorize`'s), its media and
tools, and the difficulty estimate itself:

    score(x)     = (w_shared + w_tenant) · x          each weight Gaussian, diagonal
    acceptable   = Φ(mean / √(β² + variance))          the predictive probability
    draw         = Φ((mean + sd · N(0, 1)) / β)        Thompson sampling: which tiers to explore

Before any label the score is ``difficulty_weight × (declared quality − difficulty)``: the declared
quality and the template-trained difficulty are the prior, and the labels move it.

**Tenants.**  Any inference key can label its own answers (``POST /v1/feedback``), so what one tenant
teaches must not move another's routing or costs.  Three rules:

- *A tenant's own labels decide its routing.*  The learned figure replaces the declared quality for a
  request only when the tenant has ``min_labels`` (30) labels of its own for the tier and they cover
  the request: words and kinds (media, tools, a structured format) making up ``min_coverage`` (half)
  of it were each in ``seen_labels`` (5) of them.  Another tenant's labels count for neither, so a
  tenant without labels routes on the declared quality whatever others said, and its reason shows
  no learned figure.
- *A class nobody labelled does not move with another.*  A tenant's own weights are its words' and
  kinds' only, with ``tenant_variance`` (2×) the shared prior's word variance so that its labels
  outweigh the prior; its intercept, numbers and difficulty stay the shared prior's.  With an
  intercept of its own (before, e4e3b1b), 100 bad labels on short facts sent all of the tenant's
  never-labelled word games to the cloud as well; now 300 leave them on the edge (their coverage is
  ~0.16: a few shared words), and when the tenant then labels word games 95 % good, they stay there.
- *What one tenant teaches the shared prior is bounded*: the prior learns from each tenant's first
  ``shared_labels`` (20) labels per tier, no more (counted in its tally, which outlives its weights).
  Measured (one tenant's 300 bad labels on short facts, another asking the same): the other's prior
  figure on them falls from 0.79 to 0.44, which moves none of its requests (the gate above), and
  once it has 40 labels of its own (80 % good) its figure is 0.69 against 0.71 with no attacker;
  with 95 % good, 0.84 against 0.87 (``python -m bench.quality_isolation``).
  The alternative, a prior learned only where several tenants
  agree (a median of their weights per word), needs three or more tenants labelling the same words
  before it learns anything, costs a pass over the tenants per label, and still lets one tenant be
  one of the three; a cap is one counter per (tenant, tier) and its bound is one number: a key moves
  the prior by at most 20 labels' worth, and never another tenant's routing by itself.

Exploration sends a share of requests to a cheaper tier not learned yet for them, or whose draw
passes the floor (router/_strategies.py).  Scores in [0, 1] count as good from 0.5 up.  Memory: at
most two floats per hashed bucket per tier (shared) and three per (tier, tenant), tenants bounded
(least recently labelled dropped).  Figures: ``python -m bench.quality_sim`` and the tests in
tests/router/test_quality.py and tests/hostile/test_feedback_isolation.py.
"""

from __future__ import annotations

import math
import random
import time
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Annotated, Any

import msgspec

from router._features import Features
from router._learning import tally
from router._learning.difficulty import BUCKETS, NUMERIC, vectorize, words
from router._learning.tally import LabelTally
from tiers import Ability, Modality

# The quality model's features beyond the difficulty vector's, each 0 or 1 but difficulty.
EXTRAS = ("image", "audio", "video", "tools", "structured", "difficulty", "bias")
BIAS = BUCKETS + len(NUMERIC) + len(EXTRAS) - 1
_EXTRA_AT = {name: BUCKETS + len(NUMERIC) + i for i, name in enumerate(EXTRAS)}
# What says which requests a tenant has labelled (:meth:`QualityModel.coverage`): its words and these.
_KINDS = frozenset(_EXTRA_AT[name] for name in ("image", "audio", "video", "tools", "structured"))
_NORMAL = NormalDist()
FORMAT = 2  # of the saved weights: 2 since the shared prior is bounded (older ones are not loaded)

# A request's quality features, sparse: bucket indices and their values.
QualityKeys = tuple[tuple[int, ...], tuple[float, ...]]


class QualityConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How the quality model learns and when it is trusted."""

    # The learned acceptability replaces the declared quality for a request once the tenant has this
    # many labels of its own for the tier (another tenant's never count) ...
    min_labels: Annotated[int, msgspec.Meta(ge=1)] = 30
    # ... and its labels covered the request: at least this share of its words (by their weight in
    # the request) and kinds (media, tools, a structured format) were each in ``seen_labels`` of them.
    min_coverage: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    seen_labels: Annotated[int, msgspec.Meta(ge=1)] = 5
    # ... and the sd of the request's score is at most this (probit units; the prior's is ~1.2).
    max_sd: float = 1.5
    # The prior variances: of the hashed words' weights, together (words carry what differs between
    # requests; more makes one template's few labels swing it), of the intercept, and of each number.
    word_variance: float = 0.5
    bias_variance: float = 0.1
    number_variance: float = 0.05
    tenant_variance: float = 2.0  # of a tenant's own word weights, as a multiple of the shared prior's
    # The shared prior learns from each tenant's first this many labels per tier, no more.
    shared_labels: Annotated[int, msgspec.Meta(ge=0)] = 20
    beta: float = 1.0  # the probit's noise: how much one label can say
    # The prior: score = difficulty_weight × (declared quality - difficulty), so a tier is as likely
    # acceptable as not where the declared check is on the edge (quality = difficulty), likelier
    # below, less above: the template-trained difficulty and the declared quality are the prior.
    difficulty_weight: float = 4.0
    tenants: int = 1000  # tenants' weights kept (least recently labelled dropped first)


def quality_keys(
    features: Features,
    difficulty: float | None,
    vector: tuple[list[int], list[float]] | None = None,
    read: list[str] | None = None,
) -> QualityKeys:
    """The request's features for the quality model: the difficulty model's hashed words (L2-normalised)
    and numbers (``vector`` and ``read``: its vector and the text's words, when made already), then
    media, tools, structure, difficulty, bias."""
    read = words(features.text) if read is None else read
    made = vector or vectorize(features.text, features, read)
    # The words alone, not the word pairs: fewer buckets per request, each seen more often, so a
    # few hundred labels say something of each (the pairs of a filled-in template rarely recur).
    buckets = sorted({zlib.crc32(w.encode()) & (BUCKETS - 1) for w in read})
    weight = 1 / math.sqrt(len(buckets)) if buckets else 0.0
    indices = [*buckets, *made[0][-len(NUMERIC) :]]
    values = [weight] * len(buckets) + list(made[1][-len(NUMERIC) :])
    extra = {
        "image": Modality.IMAGE in features.modalities,
        "audio": Modality.AUDIO in features.modalities,
        "video": Modality.VIDEO in features.modalities,
        "tools": Ability.TOOLS in features.needs,
        "structured": bool(features.needs & {Ability.JSON_SCHEMA, Ability.JSON_OBJECT}),
    }
    for name, on in extra.items():
        if on:
            indices.append(_EXTRA_AT[name])
            values.append(1.0)
    indices.append(_EXTRA_AT["difficulty"])
    values.append(0.5 if difficulty is None else difficulty)  # not known: as likely hard as not
    indices.append(BIAS)
    values.append(1.0)
    return tuple(indices), tuple(values)


@dataclass(frozen=True, slots=True)
class Acceptability:
    """One tier's acceptability for one request, as the router reads it from the snapshot."""

    mean: float  # the predictive probability that its answer is acceptable
    sd: float  # the score's sd (probit units): the model's uncertainty about this request
    draw: float  # a Thompson draw: what the router compares with the floor
    labels: int  # the tenant's own labels for the tier
    shared: int  # other tenants' labels in the shared prior for the tier
    learned: bool  # certain enough, on the tenant's own labels, to replace the declared quality
    coverage: float = 0.0  # the share of the request its own labels covered


class Weights:
    """Sparse Gaussian weights: a mean and a variance per bucket; unset buckets are the prior.
    ``seen``: of a tenant's own, how many of its labels had each word and kind."""

    __slots__ = ("labels", "mean", "prior", "seen", "var")

    def __init__(self, prior: Mapping[int, tuple[float, float]], default: tuple[float, float]) -> None:
        self.prior = dict(prior)
        self.prior[-1] = default
        self.mean: dict[int, float] = {}
        self.var: dict[int, float] = {}
        self.seen: dict[int, int] = {}
        self.labels = 0

    def _prior(self, i: int) -> tuple[float, float]:
        return self.prior.get(i) or self.prior[-1]

    def score(self, keys: QualityKeys) -> tuple[float, float]:
        """The score's mean and variance for ``keys`` (on the request path: kept to plain lookups)."""
        mean = var = 0.0
        prior, default = self.prior.get, self.prior[-1]
        means, variances = self.mean.get, self.var.get
        for i, x in zip(*keys, strict=True):
            m0, v0 = prior(i, default)
            mean += means(i, m0) * x
            var += variances(i, v0) * x * x
        return mean, var

    def coverage(self, keys: QualityKeys, enough: int) -> float:
        """The share of ``keys``' words and kinds (by x²) that ``enough`` of the labels had."""
        covered = total = 0.0
        seen = self.seen.get
        for i, x in zip(*keys, strict=True):
            if i < BUCKETS or i in _KINDS:
                total += x * x
                if seen(i, 0) >= enough:
                    covered += x * x
        return covered / total if total else 0.0

    def update(self, keys: QualityKeys, step: float, shrink: float) -> None:
        """Move each weight by ``step`` × its variance × x; shrink its variance by ``shrink`` × v² x²."""
        for i, x in zip(*keys, strict=True):
            m0, v0 = self._prior(i)
            if v0 == 0.0:  # fixed (a tenant's intercept, numbers and difficulty)
                continue
            v = self.var.get(i, v0)
            self.mean[i] = self.mean.get(i, m0) + step * v * x
            self.var[i] = max(v * (1 - shrink * v * x * x), v0 * 1e-3)

    def saw(self, keys: QualityKeys) -> None:
        for i in keys[0]:
            if i < BUCKETS or i in _KINDS:
                self.seen[i] = self.seen.get(i, 0) + 1

    def dump(self) -> dict[str, Any]:
        return {"labels": self.labels, "mean": self.mean, "var": self.var, "seen": self.seen}

    def load(self, saved: Mapping[str, Any]) -> None:
        self.labels = int(saved.get("labels", 0))
        self.mean = {int(k): float(v) for k, v in saved.get("mean", {}).items()}
        self.var = {int(k): float(v) for k, v in saved.get("var", {}).items()}
        self.seen = {int(k): int(v) for k, v in saved.get("seen", {}).items()}


def _v(t: float) -> float:
    """φ(t)/Φ(t), stable far into the left tail (there it tends to -t)."""
    if t < -30:
        return -t
    cdf = 0.5 * math.erfc(-t / math.sqrt(2))
    return math.exp(-0.5 * t * t) / math.sqrt(2 * math.pi) / max(cdf, 1e-300)


class QualityModel:
    """Per tier, the shared prior's weights and each tenant's own; labels folded one by one."""

    def __init__(self, config: QualityConfig | None = None, *, clock: Any = time.time) -> None:
        self.config = config or QualityConfig()
        self._global: dict[str, Weights] = {}
        self._tenants: OrderedDict[str, dict[str, Weights]] = OrderedDict()
        self.tallies: tally.Tallies = {}
        self.declared: dict[str, float] = {}
        self._clock = clock

    # -- the weights -------------------------------------------------------------------------

    def _global_of(self, tier: str, declared: float) -> Weights:
        found = self._global.get(tier)
        if found is None:
            c = self.config
            k = c.difficulty_weight
            prior = {BUCKETS + i: (0.0, c.number_variance) for i in range(len(NUMERIC) + len(EXTRAS) - 1)}
            prior[BIAS] = (k * declared, c.bias_variance)
            prior[_EXTRA_AT["difficulty"]] = (-k, c.number_variance)
            found = self._global[tier] = Weights(prior, (0.0, c.word_variance))
            self.declared.setdefault(tier, declared)
        return found

    def _tenant_of(self, tenant: str, tier: str, create: bool) -> Weights | None:
        tiers = self._tenants.get(tenant)
        if tiers is None:
            if not create:
                return None
            tiers = self._tenants[tenant] = {}
            while len(self._tenants) > self.config.tenants:
                self._tenants.popitem(last=False)
        elif create:
            self._tenants.move_to_end(tenant)
        found = tiers.get(tier)
        if found is None and create:
            c = self.config
            share = c.tenant_variance
            # Its words and kinds learn; its intercept, numbers and difficulty do not (fixed at the
            # shared prior's): what one class of its requests teaches stays with that class.
            prior = {BUCKETS + i: (0.0, 0.0) for i in range(len(NUMERIC) + len(EXTRAS))}
            prior |= {i: (0.0, c.number_variance * share) for i in _KINDS}
            found = tiers[tier] = Weights(prior, (0.0, c.word_variance * share))
        return found

    def _score(self, tenant: str, tier: str, declared: float, keys: QualityKeys) -> tuple[float, float]:
        mean, var = self._global_of(tier, declared).score(keys)
        own = self._tenant_of(tenant, tier, create=False)
        if own is not None:
            m, v = own.score(keys)
            return mean + m, var + v
        c = self.config  # no weights of its own yet: their prior's variance (its words)
        return mean, var + c.tenant_variance * c.word_variance

    # -- the request path ----------------------------------------------------------------------

    def assess(
        self, tenant: str, tier: str, declared: float, keys: QualityKeys, rng: random.Random
    ) -> Acceptability:
        """Tier ``tier``'s acceptability for a request of ``tenant`` with ``keys``, and a Thompson draw.
        Learned (it replaces the declared quality) on the tenant's own labels only: enough of them for
        the tier, covering this request."""
        mean, var = self._score(tenant, tier, declared, keys)
        c = self.config
        sd = math.sqrt(var)
        p = _NORMAL.cdf(mean / math.sqrt(c.beta * c.beta + var))
        draw = _NORMAL.cdf((mean + sd * rng.gauss(0.0, 1.0)) / c.beta)
        own = self._tenant_of(tenant, tier, create=False)
        labels = own.labels if own is not None else 0
        covered = own.coverage(keys, c.seen_labels) if own is not None else 0.0
        counted = self.tallies.get((tenant, tier))
        shared = self._global[tier].labels - (counted.shared if counted is not None else 0)
        learned = labels >= c.min_labels and covered >= c.min_coverage and sd <= c.max_sd
        return Acceptability(p, sd, draw, labels, max(0, shared), learned, covered)

    # -- learning --------------------------------------------------------------------------------

    def label(self, tenant: str, tier: str, keys: QualityKeys, good: bool, at: float | None = None) -> None:
        """Learn one label: ``tier``'s answer to a request with ``keys`` was acceptable (``good``) or not.
        The tenant's own weights learn from every label of its own; the shared prior from its first
        ``shared_labels`` for the tier only."""
        declared = self.declared.get(tier, 0.5)
        shared = self._global_of(tier, declared)
        own = self._tenant_of(tenant, tier, create=True)
        assert own is not None
        counted = self.tallies.setdefault((tenant, tier), LabelTally())
        learners = [own]
        if counted.shared < self.config.shared_labels:
            learners.append(shared)
            counted.shared += 1
        mean, var = self._score(tenant, tier, declared, keys)
        y = 1.0 if good else -1.0
        total = self.config.beta**2 + var
        s = math.sqrt(total)
        t = y * mean / s
        v = _v(t)
        w = v * (v + t)
        for weights in learners:
            weights.update(keys, y * v / s, w / total)
            weights.labels += 1
        own.saw(keys)
        counted.add(good, self._clock() if at is None else at)

    # -- operators -------------------------------------------------------------------------------

    def report(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Per (tenant, tier): labels, the share good, per hour (oldest first)."""
        return tally.report(self.tallies, self.declared, tenant)

    # -- persistence -----------------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "declared": self.declared,
            "global": {tier: w.dump() for tier, w in self._global.items()},
            "tenants": {t: {tier: w.dump() for tier, w in ws.items()} for t, ws in self._tenants.items()},
            "tallies": tally.dump(self.tallies),
        }

    def load(self, data: Mapping[str, Any]) -> None:
        """What :meth:`dump` saved.  Weights saved in another format (before the shared prior was
        bounded, it held every tenant's labels) are not loaded: the model starts from the declared
        prior again, the label counts kept for operators."""
        for tier, q in data.get("declared", {}).items():
            self.declared[tier] = float(q)
        current = data.get("format") == FORMAT
        if current:
            for tier, saved in data.get("global", {}).items():
                self._global_of(tier, self.declared.get(tier, 0.5)).load(saved)
            for tenant, tiers in data.get("tenants", {}).items():
                for tier, saved in tiers.items():
                    own = self._tenant_of(tenant, tier, create=True)
                    assert own is not None
                    own.load(saved)
        self.tallies = tally.load(data.get("tallies", []), fresh=not current)
