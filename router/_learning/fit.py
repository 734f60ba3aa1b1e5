"""Fitting a tier's latency models (runs in a worker process: plain data in and out).

Quantile regressions with non-negative coefficients, one per target and quantile, on the window
of a tier's observations (:class:`router._learning.predictor.Observation` as lists); see
:mod:`router._learning.predictor` for the features and why the fit minimises relative error.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from router._learning.predictor import BATCH, OTHERS, OUT_K, OUTPUT, TARGETS, PredictorConfig, with_output


def _fit_one(x: Any, y: Any, quantile: float, alpha: float) -> list[float]:
    """Quantile regression with non-negative coefficients, minimising the quantile loss of the
    *relative* error (weights 1/y), as a linear programme:

        min  Σ_i w_i (q u_i + (1 − q) v_i) + alpha Σ_j b_j
        s.t. X_s b + u − v = y,   b, u, v ≥ 0

    over columns scaled to at most 1 (``alpha`` then penalises every feature alike)."""
    import numpy as np
    from scipy import sparse
    from scipy.optimize import linprog

    n, width = x.shape
    scale = np.maximum(np.abs(x).max(axis=0), 1e-9)
    scale[0] = 1.0
    weights = 1.0 / np.maximum(y, 0.01) / n
    cost = np.concatenate([np.full(width, alpha), quantile * weights, (1 - quantile) * weights])
    eye = sparse.identity(n, format="csr")
    constraints = sparse.hstack([sparse.csr_matrix(x / scale), eye, -eye], format="csr")
    found = linprog(cost, A_eq=constraints, b_eq=y, bounds=(0, None), method="highs")
    if not found.success:
        raise RuntimeError(f"quantile fit failed: {found.message}")
    return [float(v) for v in found.x[:width] / scale]


def _mape(coefs: list[float], x: Any, y: Any) -> float:
    import numpy as np

    predicted = np.maximum(x @ np.asarray(coefs), 0.01)
    return float(np.mean(np.abs(predicted - y) / y))


def _coverage(coefs: list[float], x: Any, y: Any) -> float:
    import numpy as np

    return float(np.mean(y <= x @ np.asarray(coefs)))


def _actual(o: list[Any]) -> list[float]:
    """An observation's features with the output it actually generated in place of the output
    expected when it was routed (when the tier reported its tokens)."""
    x, tokens = o[0], o[5] if len(o) > 5 else None
    expected = x[OUTPUT[0]]
    if tokens is None or expected <= 0:
        return list(x)
    return with_output(x, max(tokens, 1) / 1000 / expected)


def fit_tier(observations: list[list[Any]], config_raw: dict[str, Any]) -> dict[str, Any]:
    """Fit one tier's models on ``observations`` (``Observation`` as lists); plain data in and
    out, so it can run in another process.  Returns ``Coefficients`` as builtins.  The models
    learn latency given the output actually generated (so their output coefficients are
    seconds per generated token); :meth:`TierPredictor.predict` supplies the expected output."""
    import numpy as np

    config = msgspec.convert(config_raw, PredictorConfig)
    quantiles = (0.5, config.high_quantile)
    result: dict[str, Any] = {"fitted_at": time.time(), "samples": len(observations), "metrics": {}}
    result["others_max"] = max((float(o[0][OTHERS]) for o in observations), default=0.0)
    observations = [[_batched(_actual(o)), *o[1:3]] for o in observations]
    for target in TARGETS:
        rows = [o for o in observations if (o[1] if target == "ttft" else o[2]) is not None]
        if target == "ttft" and len(rows) < config.min_samples:
            rows = [[o[0], o[2], o[2]] for o in observations]  # no streamed requests yet: TTFT ≤ total
        x = np.asarray([r[0] for r in rows], dtype=float)
        y = np.asarray([r[1] if target == "ttft" else r[2] for r in rows], dtype=float)
        y = np.maximum(y, 0.01)
        split = int(len(rows) * 0.8)
        if len(rows) - split >= 5 and split >= config.min_samples:
            held = [_fit_one(x[:split], y[:split], q, config.alpha) for q in quantiles]
            result["metrics"][f"{target}_holdout_mape"] = _mape(held[0], x[split:], y[split:])
            result["metrics"][f"{target}_holdout_coverage"] = _coverage(held[1], x[split:], y[split:])
            result["metrics"][f"{target}_holdout_n"] = float(len(rows) - split)
        result[target] = [_tied(_fit_one(x, y, q, config.alpha)) for q in quantiles]
    return result


def _batched(x: list[float]) -> list[float]:
    """``x`` with the batch's extra tokens counted in out_k: the fit learns seconds per token
    alone from every request, batched or not, and :func:`_tied` gives the batch column that."""
    x = list(x)
    x[OUT_K] += x[BATCH]
    x[BATCH] = 0.0
    return x


def _tied(coefs: list[float]) -> list[float]:
    coefs[BATCH] = coefs[OUT_K]
    return coefs
