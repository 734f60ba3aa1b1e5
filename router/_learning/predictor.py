"""Latency predictors: per tier, time to first token and total time, a median and a high quantile.

Each target is a linear quantile regression with **non-negative** coefficients over a few
engineered features of the request and the tier's live state (:func:`design`), fitted as a
linear programme (scipy's HiGHS) that minimises the *relative* error: each observation's
absolute error is weighted by 1/observed, so the median fit minimises the mean absolute
percentage error.  Every feature is an amount of work or of waiting (prompt tokens, expected
output tokens, images, video frames, requests ahead, the other tiers' load, and output tokens
times load), so non-negative coefficients are physical (seconds per unit) and the model cannot
predict a negative time for a request unlike those it saw.  The total-time model is in effect
time to first token + expected output tokens × seconds per token at the current load; the
expected output is ``max_tokens`` × the share answers to requests like this one used
(:mod:`router._learning.output`).

The request path only takes dot products of the fitted coefficients (microseconds); fitting
happens in the background on a window of recent observations (:func:`fit_tier`, run in a
worker process by the gateway).  Recording an observation is an append plus an update of two
online corrections per target, from the predictions made when the request was routed (nothing
is predicted again): the median's, a running *median* of log(observed / predicted median) (a
fixed step towards the sign of each error, so a tier that slows down is followed within a few
requests but one 20x stall moves it no more than an ordinary miss), and the high quantile's, a
pinball-loss step on whether the request went past its predicted high quantile (up by ``q``
times the step when it did, down by ``1 - q`` times it when not: it settles where a share
``1 - q`` go past).  An earlier mean of the log-ratios was pulled up by the rare stalls of a
shared machine and inflated every prediction of the tier after them.  Before a tier has
``min_samples`` observations a prior (a rough tokens/s guess) stands in.

Error is measured on data the model did not train on: at each refit the newest 20% of the
window is held out for a fit on the rest (``holdout_mape``), and every live prediction (made
before its request ran) is kept beside what then happened (``live_mape``, computed when asked).
"""

from __future__ import annotations

import math
import operator
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from router._features import Features
from tiers import TierState

# Expected output when a request sets no max_tokens.
DEFAULT_OUTPUT_TOKENS = 256
TARGETS = ("ttft", "total")
FEATURE_NAMES = (
    "one",
    "prompt_k",  # prompt tokens / 1000
    "out_k",  # expected output tokens / 1000: max_tokens × the share answers like it use
    "images",
    "pixels_m",
    "media_s",  # video + audio seconds
    "frames",
    "busy_s",  # predicted time left of the requests the tier is serving
    "ahead_s",  # ... and then of the requests queued there
    "out_k_x_load",  # decoding slows with the batch a request shares
    # ... by as much as the tier measured (out_k × (TierState.slowdown - 1)): its coefficient is
    # out_k's, not fitted, so a token decoded s times slower costs s times a token alone.
    "out_k_x_batch",
    "others_load",  # requests at the other tiers: co-located tiers share the machine's cores
    "prompt_k_x_others",  # ... which slows the prompt's evaluation
    "out_k_x_others",  # ... and every generated token
)
WIDTH = len(FEATURE_NAMES)
BUSY, AHEAD = FEATURE_NAMES.index("busy_s"), FEATURE_NAMES.index("ahead_s")
OUT_K, BATCH = FEATURE_NAMES.index("out_k"), FEATURE_NAMES.index("out_k_x_batch")
OTHERS = FEATURE_NAMES.index("others_load")
# The columns proportional to the other tiers' load.
_WITH_OTHERS = tuple(FEATURE_NAMES.index(n) for n in ("others_load", "prompt_k_x_others", "out_k_x_others"))
# The columns proportional to the request's output tokens.
OUTPUT = tuple(FEATURE_NAMES.index(n) for n in ("out_k", "out_k_x_load", "out_k_x_batch", "out_k_x_others"))


def with_output(x: Sequence[float], factor: float) -> list[float]:
    """``x`` with its output-token columns scaled by ``factor``: the same request producing
    ``factor`` times the tokens ``x`` expected."""
    out = list(x)
    for i in OUTPUT:
        out[i] *= factor
    return out


def within(x: Sequence[float], most: float | None) -> Sequence[float]:
    """``x`` with the other tiers' load at most ``most``, the most the model was fitted on.  The
    other tiers slow this one through the cores they share, which they saturate with a few
    requests (each engine has its own: tiers/_cpus.py); requests queued there beyond that add no
    load here.  Extrapolated, a slowdown fitted at 3 requests read the cloud's backlog of 30 as a
    10x slower edge, which sent more to the cloud (replay at 1.0/s)."""
    load = x[OTHERS]
    if most is None or load <= most:
        return x
    out = list(x)
    for i in _WITH_OTHERS:
        out[i] *= most / load
    return out


_NORMAL = statistics.NormalDist()
NO_CORRECTION = {"ttft": 0.0, "total": 0.0, "ttft_hi": 0.0, "total_hi": 0.0}
_MAX_CORRECTION = 3.0  # |log| of the corrections: at most ~20x either way


def z_of(percentile: float) -> float:
    """The standard normal quantile of ``percentile`` (0..100, exclusive)."""
    return _NORMAL.inv_cdf(percentile / 100)


class PredictorConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    high_quantile: float = 0.95
    window: int = 1500  # observations kept per tier for refits
    min_samples: int = 16  # below this a tier is predicted by the prior
    refit_every: int = 40  # observations between background refits
    # ... and at least this long between them: a refit costs a core for a while, and a busy gateway
    # reaches refit_every many times a second.
    refit_interval_s: float = 30.0
    correction_rate: float = 0.05  # step (in log) of the online corrections per observation
    alpha: float = 0.0005  # L1 penalty of the quantile regressions (on scaled features)


def design(
    features: Features,
    state: TierState,
    mean_service_s: float,
    share: float = 1.0,
    others_load: float = 0.0,
    wait: tuple[float, float] | None = None,
    prompt_tokens: int | None = None,
) -> tuple[float, ...]:
    """The feature vector of ``features`` at a tier now (order: :data:`FEATURE_NAMES`);
    ``share``: the expected share of ``max_tokens`` the answer will use; ``others_load``: requests
    in flight or queued at the other tiers; ``wait``: (busy_s, ahead_s), the predicted time left
    of the requests the tier is serving and of those queued (:class:`router._learning.work.WorkBook`),
    else their counts × ``mean_service_s``; ``prompt_tokens``: the prompt's length in the tier's
    tokens (:mod:`router._learning.tokens`), else the request's plain estimate."""
    busy_s, ahead_s = wait or (state.in_flight * mean_service_s, state.queued * mean_service_s)
    out_k = (features.max_tokens or DEFAULT_OUTPUT_TOKENS) * share / 1000
    prompt_k = (features.prompt_tokens if prompt_tokens is None else prompt_tokens) / 1000
    media = features.media
    return (
        1.0,
        prompt_k,
        out_k,
        float(media.images),
        media.image_pixels / 1e6,
        media.video_seconds + media.audio_seconds,
        float(media.video_frames),
        busy_s,
        ahead_s,
        out_k * (state.in_flight + state.queued),
        out_k * (state.slowdown - 1.0),
        others_load,
        prompt_k * others_load,
        out_k * others_load,
    )


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    total: float = sum(map(operator.mul, a, b))  # the widths match: load() drops a file of another width
    return total


# A prior for a tier nobody has measured: ~0.3 s to the first token + 1 ms per prompt token,
# ~25 generated tokens/s, and waiting work counted in full; the high quantile 1.5x.
_PRIOR_TTFT = (0.3, 1.0, 0.0, 0.2, 0.0, 0.05, 0.02, 0.5, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
_PRIOR_TOTAL = (0.3, 1.0, 40.0, 0.2, 0.0, 0.05, 0.02, 0.5, 1.0, 0.0, 40.0, 0.0, 0.0, 0.0)
Prior = tuple[tuple[float, ...], tuple[float, ...]]


def measured_prior(tokens_per_s: float, first_token_s: float) -> Prior:
    """The prior of a tier that timed itself at load (an edge engine, one request alone): its first
    token in ``first_token_s`` and each further one in ``1 / tokens_per_s``.  The guess above is off
    by 30x on a GPU: SmolLM2 makes 766 tok/s on an H200, ~25 on two busy CPU cores."""
    ttft, total = list(_PRIOR_TTFT), list(_PRIOR_TOTAL)
    if first_token_s > 0:
        ttft[0] = total[0] = first_token_s
    total[OUT_K] = total[BATCH] = 1000.0 / tokens_per_s
    return tuple(ttft), tuple(total)


@dataclass(frozen=True, slots=True)
class Prediction:
    """Seconds at the median and the high quantile, and the predicted cost in USD."""

    ttft_p50: float
    ttft_hi: float
    total_p50: float
    total_hi: float
    high_quantile: float
    cost_usd: float = 0.0
    # The answer's expected length, and the median total's seconds per output token at it: how far
    # the median moves when the answer turns out longer or shorter than expected.
    tokens: float = 0.0
    per_token_s: float = 0.0

    def at(self, target: str, percentile: float) -> float:
        """The latency at ``percentile``: between the median and the high quantile on a normal
        scale (beyond the high quantile, extrapolated the same way)."""
        p50, hi = (self.ttft_p50, self.ttft_hi) if target == "ttft" else (self.total_p50, self.total_hi)
        if percentile <= 50:
            return p50
        return p50 + (hi - p50) * z_of(percentile) / z_of(self.high_quantile * 100)


class Coefficients(msgspec.Struct, kw_only=True):
    """Fitted coefficients of one tier: target → [median, high quantile] coefficient lists."""

    ttft: list[list[float]]
    total: list[list[float]]
    fitted_at: float = 0.0
    samples: int = 0
    metrics: dict[str, float] = msgspec.field(default_factory=dict)
    # The most others_load among the observations fitted: predictions take no more (:func:`within`).
    others_max: float | None = None


class Observation(msgspec.Struct, array_like=True):
    x: list[float]
    ttft: float | None  # seconds; None when not streamed
    total: float
    # The medians predicted when the request was routed (before it ran): its held-out error.
    predicted_ttft: float | None = None
    predicted_total: float | None = None
    tokens: int | None = None  # the completion tokens it generated, when the tier said


@dataclass(slots=True)
class TierPredictor:
    """What the router knows about one tier's latency."""

    config: PredictorConfig
    coefficients: Coefficients | None = None
    window: deque[Observation] = field(default_factory=deque)
    # log-scale corrections: "ttft"/"total" shift both quantiles (a running median of the log
    # error), "ttft_hi"/"total_hi" the high quantile further (its exceedance rate kept at 1 - q).
    correction: dict[str, float] = field(default_factory=lambda: dict(NO_CORRECTION))
    # EWMA of the total latency of requests that found the tier idle (nothing served or queued
    # there): its service time, without the waiting that the busy/ahead features account for.
    mean_service_s: float = 1.0
    completion_ratio: float = 0.6  # EWMA of completion tokens / max_tokens
    since_refit: int = 0
    # What stands in before the first fit: the guess above, or the tier's own speed (:meth:`seed`).
    prior: Prior = (_PRIOR_TTFT, _PRIOR_TOTAL)
    seeded: tuple[float, float] = (0.0, 0.0)  # (tokens/s, first token s) the prior was made from

    def seed(self, tokens_per_s: float, first_token_s: float) -> None:
        """Start from the speed the tier measured on this hardware (TierState.tokens_per_s)."""
        if tokens_per_s > 0 and (tokens_per_s, first_token_s) != self.seeded:
            self.prior = measured_prior(tokens_per_s, first_token_s)
            self.seeded = (tokens_per_s, first_token_s)

    def predict(self, x: Sequence[float], ceiling: float = 1.0) -> tuple[float, float, float, float]:
        """(ttft p50, ttft high, total p50, total high) in seconds.  The models are of latency
        given the output's length: the median is taken at the expected output (``x``), the high
        quantile at the longest the answer can be, ``ceiling`` times that (max_tokens / expected)."""
        c = self.coefficients
        x = within(x, c.others_max) if c is not None else x
        top = with_output(x, ceiling) if ceiling != 1.0 else x
        out = []
        for target, prior in zip(TARGETS, self.prior, strict=True):
            if c is None:
                mid = _dot(prior, x)
                hi = (_dot(prior, top) if top is not x else mid) * 1.5
            else:
                coefs = c.ttft if target == "ttft" else c.total
                mid, hi = _dot(coefs[0], x), _dot(coefs[1], top)
            shift = self.correction.get(target, 0.0)
            mid = max(mid * math.exp(shift), 0.01)
            hi = hi * math.exp(shift + self.correction.get(f"{target}_hi", 0.0))
            out += [mid, max(hi, mid)]
        # The whole answer takes at least as long as its first token.
        return out[0], out[1], max(out[2], out[0]), max(out[3], out[1])

    def per_token(self, x: Sequence[float]) -> float:
        """Seconds the median total adds per output token beyond those ``x`` expects (its
        output-proportional part over the expected tokens)."""
        tokens = x[OUT_K] * 1000
        if tokens <= 0:
            return 0.0
        c = self.coefficients
        x = within(x, c.others_max) if c is not None else x
        coefs = c.total[0] if c is not None else self.prior[1]
        part = sum(coefs[i] * x[i] for i in OUTPUT) * math.exp(self.correction.get("total", 0.0))
        return part / tokens

    def observe(
        self,
        x: Sequence[float],
        ttft: float | None,
        total: float,
        predicted: tuple[float | None, float | None] = (None, None),
        tokens: int | None = None,
        predicted_hi: tuple[float | None, float | None] = (None, None),
    ) -> None:
        """Learn from one served request (its features as they were when it was routed);
        ``predicted``: the (ttft, total) medians predicted then, if any (else none are scored
        and the corrections stand); ``tokens``: the completion tokens it generated;
        ``predicted_hi``: the (ttft, total) high quantiles predicted then."""
        step, q = self.config.correction_rate, self.config.high_quantile
        targets = (
            ("ttft", ttft, predicted[0], predicted_hi[0]),
            ("total", total, predicted[1], predicted_hi[1]),
        )
        for target, seen, guess, high in targets:
            if seen is None or seen <= 0:
                continue
            if guess is not None and guess > 0 and seen != guess:
                # A running median of the log error: a step towards its sign, whatever its size.
                self._correct(target, step if seen > guess else -step)
            if high is not None and high > 0:
                # Pinball loss of the high quantile: up q steps past it, down 1 - q steps within it.
                self._correct(f"{target}_hi", 2 * step * (q if seen > high else q - 1))
        if x[BUSY] == 0 and x[AHEAD] == 0 and x[BATCH] == 0:  # alone: not waiting, not slowed by a batch
            self.mean_service_s += 0.1 * (total - self.mean_service_s)
        self.window.append(Observation(list(x), ttft, total, predicted[0], predicted[1], tokens))
        if len(self.window) > self.config.window:
            self.window.popleft()
        self.since_refit += 1

    def _correct(self, key: str, by: float) -> None:
        value = self.correction.get(key, 0.0) + by
        self.correction[key] = max(-_MAX_CORRECTION, min(_MAX_CORRECTION, value))

    def observe_usage(self, max_tokens: int | None, completion_tokens: int) -> None:
        wanted = max_tokens or DEFAULT_OUTPUT_TOKENS
        self.completion_ratio += 0.05 * (min(1.0, completion_tokens / wanted) - self.completion_ratio)

    def due(self) -> bool:
        return len(self.window) >= self.config.min_samples and (
            self.coefficients is None or self.since_refit >= self.config.refit_every
        )

    def adopt(self, coefficients: Coefficients) -> None:
        """Take a refit's result; the online correction starts over from it."""
        self.coefficients = coefficients
        self.correction = dict(NO_CORRECTION)
        self.since_refit = 0

    def live_mape(self, target: str, last: int = 500) -> float | None:
        """Mean |predicted − observed| / observed of the medians predicted before the newest
        ``last`` requests ran."""
        errors = []
        for o in reversed(self.window):
            seen, guess = (o.ttft, o.predicted_ttft) if target == "ttft" else (o.total, o.predicted_total)
            if seen is not None and seen > 0 and guess is not None:
                errors.append(abs(guess - seen) / seen)
                if len(errors) >= last:
                    break
        return sum(errors) / len(errors) if errors else None

    def snapshot(self) -> dict[str, Any]:
        c = self.coefficients
        return {
            "samples": len(self.window),
            "fitted": c is not None,
            "fitted_at": c.fitted_at if c else None,
            "metrics": dict(c.metrics) if c else {},
            "live_mape": {t: self.live_mape(t) for t in TARGETS},
            "correction": {t: math.exp(v) for t, v in self.correction.items()},
            "mean_service_s": self.mean_service_s,
            "completion_ratio": self.completion_ratio,
            "prior_tokens_per_s": self.seeded[0] or None,  # None: the generic guess (~25 tok/s)
        }
