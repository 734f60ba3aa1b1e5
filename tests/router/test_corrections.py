"""The online corrections between refits: the median's is a running median of the log error,
so the rare stalls of a shared machine do not inflate every later prediction of the tier; the
high quantile's keeps the share of requests past it near 1 - q; the whole answer is never
predicted to come before its first token."""

from __future__ import annotations

import math
import random

import router
from router._learning.predictor import Coefficients, TierPredictor

WIDTH = len(router.FEATURE_NAMES)
X = [1.0] + [0.0] * (WIDTH - 1)


def fitted(ttft_s: float = 0.5, total_s: float = 2.0, spread: float = 1.5) -> TierPredictor:
    """A tier whose models predict constant times (coefficient on the intercept only)."""
    p = TierPredictor(router.PredictorConfig())
    zero = [0.0] * (WIDTH - 1)
    p.adopt(
        Coefficients(
            ttft=[[ttft_s, *zero], [ttft_s * spread, *zero]],
            total=[[total_s, *zero], [total_s * spread, *zero]],
        )
    )
    return p


def serve(p: TierPredictor, total_s: float) -> None:
    """One request, scored against what was predicted for it when it was routed."""
    _, _, mid, hi = p.predict(X)
    p.observe(X, None, total_s, (None, mid), None, (None, hi))


def test_one_stall_moves_the_median_correction_no_more_than_an_ordinary_miss() -> None:
    p = fitted()
    for i in range(40):
        serve(p, 2.0 * (1.1 if i % 2 else 0.9))  # the model is right, within ±10%
    settled = p.predict(X)[2]
    serve(p, 40.0)  # one request stalled 20x (the cloud took the cores)
    after = p.predict(X)[2]
    # The earlier mean of log-ratios (weight 0.1) moved it by 20^0.1 = 1.35x.
    assert after / settled <= math.exp(p.config.correction_rate) + 1e-9
    assert 1.8 < after < 2.3


def test_the_median_correction_still_follows_a_tier_that_slows_down() -> None:
    p = fitted()
    for _ in range(60):
        serve(p, 6.0)  # the tier became three times slower
    assert 5.0 < p.predict(X)[2] < 7.0


def test_the_high_quantile_correction_keeps_about_one_in_twenty_past_it() -> None:
    rng = random.Random(1)
    p = fitted(spread=1.05)  # a high quantile barely above the median: too low
    past = 0
    for i in range(1000):
        seen = rng.uniform(2.0, 3.0)
        past += i >= 500 and seen > p.predict(X)[3]
        serve(p, seen)
    _, _, mid, hi = p.predict(X)
    assert 2.2 < mid < 2.8  # the median of 2..3 s
    assert 2.7 < hi < 3.3  # ... and its 95th percentile, 2.95 s, within a few steps
    assert 0.02 < past / 500 < 0.10

    q = fitted(spread=4.0)  # far too high: nothing ever gets past it
    before = q.predict(X)[3]
    for _ in range(200):
        serve(q, 2.0)
    assert q.predict(X)[3] < before * 0.7


def test_a_total_is_never_predicted_below_its_time_to_first_token() -> None:
    p = fitted(ttft_s=3.0, total_s=1.0)
    ttft_mid, ttft_hi, total_mid, total_hi = p.predict(X)
    assert total_mid >= ttft_mid == 3.0 and total_hi >= ttft_hi


def test_a_saved_state_without_high_quantile_corrections_still_loads() -> None:
    r = router.Learner({})
    r.predictor("edge").adopt(fitted().coefficients)  # type: ignore[arg-type]
    saved = r.dump()
    saved["tiers"]["edge"]["correction"] = {"ttft": 0.1, "total": 0.2}  # an older file
    fresh = router.Learner({})
    fresh.load(saved)
    assert fresh.predictor("edge").correction["total_hi"] == 0.0
    assert fresh.predictor("edge").predict(X)[2] == 2.0 * math.exp(0.2)
