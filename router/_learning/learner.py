"""The learner: what the router knows about the tiers, and learning it from what happened.

It owns the latency predictors, their online corrections, the output-share model, the prompt
token calibration, the book of work in hand at each tier, and exploration.  For each request
it takes a :class:`router.Snapshot` (:meth:`Learner.snapshot`: predictions for the tiers, the
exploration draw, the round-robin turn) that :meth:`router.Router.decide` reads without
changing anything; :meth:`Learner.routed` then books the request at the tier chosen, and
:meth:`Learner.observe` learns from what it took (or, apart, :meth:`Learner.finished` when
it ends and :meth:`Learner.fold` of a batch of them later, as the gateway does).
Synchronous and without I/O: the gateway persists :meth:`Learner.dump`, runs refits
(:func:`router.fit_tier`) wherever it likes and hands the results to :meth:`Learner.adopt`.
"""

from __future__ import annotations

import itertools
import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from router._cost import FREE, TierPrice
from router._decision import Decision, TierView
from router._features import Features
from router._learning.difficulty import DifficultyModel, vectorize, words
from router._learning.output import OutputShare, output_keys
from router._learning.predictor import (
    AHEAD,
    BUSY,
    DEFAULT_OUTPUT_TOKENS,
    NO_CORRECTION,
    OUT_K,
    WIDTH,
    Coefficients,
    Observation,
    Prediction,
    PredictorConfig,
    TierPredictor,
    design,
)
from router._learning.quality import Acceptability, QualityConfig, QualityKeys, QualityModel, quality_keys
from router._learning.tokens import PromptTokens
from router._learning.work import WorkBook
from router._policy import TenantPolicy
from router._snapshot import Snapshot, Spend

DUMP_FORMAT = 1

# What :meth:`Learner.observe` is told of a request served, as one value: the decision, the tier
# that served it, its seconds to the first token (None: not streamed) and in all, and the
# completion and prompt tokens the tier counted.
Observed = tuple[Decision, str, float | None, float, int | None, int | None]
# A label for an answer (:meth:`Learner.label`): the tenant, the tier that answered, the request's
# quality features, whether the answer was acceptable, and when (wall clock).
Label = tuple[str, str, QualityKeys, bool, float]


class Learner:
    def __init__(
        self,
        prices: Mapping[str, TierPrice],
        *,
        exploration: float = 0.02,
        predictor: PredictorConfig | None = None,
        difficulty: DifficultyModel | None = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        quality: QualityConfig | None = None,
    ) -> None:
        self.prices = dict(prices)
        self.config = predictor or PredictorConfig()
        self.difficulty = difficulty
        self.exploration = exploration
        self.predictors: dict[str, TierPredictor] = {}
        self.output = OutputShare()
        self.tokens = PromptTokens()  # the prompt in each tier's tokens, from their usage
        self.version = 0  # grows with every refit adopted
        self.work = WorkBook()  # what each tier has in hand: its wait for the next request
        self.quality = QualityModel(quality)  # how likely each tier's answer is acceptable
        self._clock = clock
        self._rng = random.Random(seed)
        self._turns = itertools.count()  # round-robin's
        # Exploration is for keeping every tier measured: a tier that served one of the last
        # 1/exploration requests routed is measured already and is not explored.
        self._horizon = math.ceil(1 / exploration) if exploration > 0 else 0
        self._routed = 0
        self._last_served: dict[str, int] = {}

    def predictor(self, tier: str) -> TierPredictor:
        found = self.predictors.get(tier)
        if found is None:
            found = self.predictors[tier] = TierPredictor(self.config)
        return found

    def _predict(
        self, view: TierView, features: Features, share: float, load: float, now: float
    ) -> tuple[tuple[float, ...], Prediction]:
        predictor = self.predictor(view.name)
        state = view.state
        predictor.seed(state.tokens_per_s, state.first_token_s)
        others = load - (state.in_flight + state.queued)
        wait = self.work.wait(
            view.name, state.in_flight, state.queued, now, predictor.mean_service_s, state.slots
        )
        prompt = self.tokens.estimate(view.name, features)
        x = design(features, state, predictor.mean_service_s, share, others, wait, prompt)
        t50, thi, tot50, tothi = predictor.predict(x, 1 / share if share > 0 else 1.0)
        price = self.prices.get(view.name, FREE)
        cost = price.estimate(features, share, tot50, prompt)
        tokens = x[OUT_K] * 1000
        per_token = predictor.per_token(x)
        return x, Prediction(t50, thi, tot50, tothi, self.config.high_quantile, cost, tokens, per_token)

    # -- the request path ----------------------------------------------------------------------

    def snapshot(
        self,
        features: Features,
        views: Sequence[TierView],
        policy: TenantPolicy,
        spend: Spend | None = None,
    ) -> Snapshot:
        """What is known now about routing ``features`` (to its pinned tier, else among ``views``)
        for a tenant with ``policy`` and ``spend``: draws this request's exploration and turn."""
        keys = output_keys(features.text, features.max_tokens, (m.value for m in features.modalities))
        share = self.output.predict(keys)
        load = float(sum(v.state.in_flight + v.state.queued for v in views))
        now = self._clock()
        pinned = features.pinned is not None
        seen = [v for v in views if v.name == features.pinned] if pinned else views
        vectors, predictions, queues = {}, {}, {}
        for view in seen:
            vectors[view.name], predictions[view.name] = self._predict(view, features, share, load, now)
            state = view.state
            queues[view.name] = self.work.queues(view.name, state.in_flight, state.queued, state.slots)
        learned = not pinned and policy.strategy == "learned"
        read = words(features.text)  # the words and numbers both models read
        vector = vectorize(features.text, features, read)
        estimate = self.difficulty.score(vector) if self.difficulty is not None else None
        difficulty = estimate if learned and policy.weigh_difficulty else None
        qkeys = quality_keys(features, estimate, vector, read)
        acceptable: dict[str, Acceptability] = {}
        if learned:
            for view in views:
                declared, tenant = view.capabilities.quality, features.tenant
                acceptable[view.name] = self.quality.assess(tenant, view.name, declared, qkeys, self._rng)
        unmeasured, explore, turn = None, None, 0
        if not pinned:
            self._routed += 1
            unmeasured = frozenset(
                v.name
                for v in views
                if self._routed - self._last_served.get(v.name, -self._horizon) > self._horizon
            )
            if learned and self.exploration > 0 and self._rng.random() < self.exploration:
                explore = self._rng.random()
            if policy.strategy == "round-robin":
                turn = next(self._turns)
        return Snapshot(
            features,
            vectors,
            predictions,
            queues,
            keys,
            share,
            difficulty,
            unmeasured,
            self.exploration,
            explore,
            turn,
            spend,
            self.work.ticket(),
            now,
            acceptable,
            qkeys,
        )

    def routed(self, decision: Decision) -> None:
        """Book a request sent to ``decision.tier`` in the book of work in hand, with its predicted
        service time: its median total with nothing ahead of it."""
        snapshot = decision.snapshot
        if snapshot is None or decision.tier not in snapshot.vectors:
            return
        x = snapshot.vectors[decision.tier]
        made = snapshot.predictions.get(decision.tier)
        if made is not None and x[BUSY] == 0 and x[AHEAD] == 0:
            service = made.total_p50  # predicted with nothing ahead already (the median: any ceiling)
        else:
            idle = list(x)
            idle[BUSY] = idle[AHEAD] = 0.0
            service = self.predictor(decision.tier).predict(idle)[2]
        queues = snapshot.queues.get(decision.tier, False)
        self.work.add(decision.tier, service, snapshot.at, (x[BUSY], x[AHEAD]), queues, snapshot.ticket)

    def observe(
        self,
        decision: Decision,
        tier: str,
        ttft_s: float | None,
        total_s: float,
        completion_tokens: int | None = None,
        prompt_tokens: int | None = None,
    ) -> None:
        """Learn from a request ``tier`` served (features as they were when it was routed);
        the token counts are the tier's own, from its usage.  :meth:`finished` then :meth:`fold`
        of the one observation: the gateway calls them apart (the first on the request path)."""
        self.finished(decision, tier)
        self.fold([(decision, tier, ttft_s, total_s, completion_tokens, prompt_tokens)])

    def finished(self, decision: Decision, tier: str) -> None:
        """A request routed by ``decision`` ended at ``tier``: out of the book of work in hand, and
        ``tier`` measured lately (two dictionary writes; the next decision reads both)."""
        snapshot = decision.snapshot
        if snapshot is None or snapshot.features is None:
            return
        self.work.done(decision.tier, snapshot.ticket)
        self._last_served[tier] = self._routed

    def fold(self, observed: Iterable[Observed]) -> int:
        """Learn from requests served (each as :meth:`observe`'s arguments, :meth:`finished`
        already told), in order: the predictors, the output share and the prompt token
        calibration, which is solved once per tier at the end (it depends only on its sums, so
        the result is the one of observing them one by one).  Returns how many were learned from."""
        learned = 0
        calibrated: set[str] = set()
        for decision, tier, ttft_s, total_s, completion_tokens, prompt_tokens in observed:
            snapshot = decision.snapshot
            if snapshot is None or snapshot.features is None or tier not in snapshot.vectors:
                continue
            features = snapshot.features
            predictor = self.predictor(tier)
            made = snapshot.predictions.get(tier)
            predicted = (made.ttft_p50, made.total_p50) if made is not None else (None, None)
            high = (made.ttft_hi, made.total_hi) if made is not None else (None, None)
            predictor.observe(snapshot.vectors[tier], ttft_s, total_s, predicted, completion_tokens, high)
            if prompt_tokens is not None and self.tokens.observe(tier, features, prompt_tokens, solve=False):
                calibrated.add(tier)
            if completion_tokens is not None:
                predictor.observe_usage(features.max_tokens, completion_tokens)
                ceiling = features.max_tokens or DEFAULT_OUTPUT_TOKENS
                self.output.update(snapshot.output_keys, completion_tokens / ceiling)
            learned += 1
        self.tokens.solve(calibrated)
        return learned

    def label(self, labels: Iterable[Label]) -> int:
        """Learn from labels of answers (the quality model); how many were learned from."""
        count = 0
        for tenant, tier, keys, good, at in labels:
            self.quality.label(tenant, tier, keys, good, at)
            count += 1
        return count

    # -- refits ------------------------------------------------------------------------------

    def due(self) -> list[tuple[str, list[list[Any]]]]:
        """Tiers whose models should be refit now, with their windows as plain data."""
        out = []
        for tier, predictor in self.predictors.items():
            if predictor.due():
                predictor.since_refit = 0  # one refit at a time per batch of observations
                out.append((tier, msgspec.to_builtins(list(predictor.window))))
        return out

    def adopt(self, tier: str, fitted: Mapping[str, Any]) -> None:
        self.predictor(tier).adopt(msgspec.convert(fitted, Coefficients))
        self.version += 1

    # -- persistence -------------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        return {
            "format": DUMP_FORMAT,
            "version": self.version,
            "saved_at": time.time(),
            "output": self.output.dump(),
            "prompt_tokens": self.tokens.dump(),
            "quality": self.quality.dump(),
            "tiers": {
                tier: {
                    "coefficients": msgspec.to_builtins(p.coefficients),
                    "window": msgspec.to_builtins(list(p.window)),
                    "correction": p.correction,
                    "mean_service_s": p.mean_service_s,
                    "completion_ratio": p.completion_ratio,
                }
                for tier, p in self.predictors.items()
            },
        }

    def load(self, data: Mapping[str, Any]) -> None:
        if data.get("format") != DUMP_FORMAT:
            raise ValueError(f"unknown predictor file format {data.get('format')!r}")
        self.version = int(data.get("version", 0))
        if "output" in data:
            self.output.load(data["output"])
        self.tokens.load(data.get("prompt_tokens", {}))
        self.quality.load(data.get("quality", {}))
        for tier, saved in data.get("tiers", {}).items():
            coefficients = saved.get("coefficients") or {}
            widths = {len(c) for c in coefficients.get("total", [])} | {
                len(o[0]) for o in saved.get("window", [])
            }
            if widths - {WIDTH}:  # saved with other features: start this tier afresh
                continue
            p = self.predictor(tier)
            if saved.get("coefficients"):
                p.coefficients = msgspec.convert(saved["coefficients"], Coefficients)
            window = msgspec.convert(saved.get("window", []), list[Observation])
            p.window = deque(window[-self.config.window :])
            saved_correction = saved.get("correction", {})
            p.correction = {**NO_CORRECTION, **{k: float(v) for k, v in saved_correction.items()}}
            p.mean_service_s = float(saved.get("mean_service_s", p.mean_service_s))
            p.completion_ratio = float(saved.get("completion_ratio", p.completion_ratio))

    def report(self) -> dict[str, Any]:
        """For operators: per tier, samples, fit time, held-out and live error."""
        out: dict[str, Any] = {
            "version": self.version,
            "tiers": {t: p.snapshot() for t, p in self.predictors.items()},
            "output_share": {"updates": self.output.updates},
            "quality": self.quality.report(),
            "prompt_tokens": {
                t: {"samples": c.samples, "weights": [round(w, 3) for w in c.weights]}
                for t, c in self.tokens.tiers.items()
            },
        }
        if self.difficulty is not None:
            d = self.difficulty
            out["difficulty"] = {
                "source": d.source,
                "examples": d.examples,
                "trained_at": d.trained_at,
                "metrics": d.metrics,
            }
        return out
