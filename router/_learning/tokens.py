"""A request's prompt in each tier's own tokens, calibrated from the counts the tiers report.

The router estimates a prompt before any tokenizer runs (:meth:`Features.estimate`: about four
characters a token, a few per turn).  What a tier counts is more: its chat template wraps every
turn, and the cloud's vision model turns each image and video frame into tens of tokens (a short
question about a 256 px picture: ~10 estimated, 130 counted).  Every answer's usage says what the
tier counted, so the router learns, per tier, a linear map from what it can see before routing to
that count:

    prompt tokens ≈ w · [1, estimated text tokens, images, video frames, audio seconds]

by exponentially weighted least squares (each observation's weight decays by ``FORGET`` per newer
one, so a model swap is followed within a few hundred requests) with a small ridge towards the
plain estimate (w = [0, 1, 0, 0, 0]): an input no request has carried lately (audio, on a tier that
takes none) keeps its prior weight instead of a guess.  An observation adds to a 5 × 5 matrix and
re-solves it (tens of microseconds, after the answer); a prediction is a dot product.  Until a tier
has reported ``min_samples`` counts, the plain estimate stands.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from router._features import Features

WIDTH = 5
FORGET = 0.995
_RIDGE = 1e-2
_PRIOR = np.array([0.0, 1.0, 0.0, 0.0, 0.0])


def _inputs(features: Features) -> tuple[float, ...]:
    media = features.media
    return (1.0, features.prompt_tokens, media.images, media.video_frames, media.audio_seconds)


class TierTokens:
    """One tier's calibration: the decayed sums of x xᵀ and x·count, and the weights solved from them."""

    def __init__(self) -> None:
        self.xx = np.zeros((WIDTH, WIDTH))
        self.xy = np.zeros(WIDTH)
        self.weights: list[float] = _PRIOR.tolist()
        self.samples = 0

    def predict(self, x: tuple[float, ...]) -> float:
        total: float = sum(map(operator.mul, self.weights, x))  # on the request path: no numpy call
        return total

    def update(self, inputs: tuple[float, ...], counted: float, solve: bool = True) -> None:
        x = np.asarray(inputs, dtype=float)
        self.xx *= FORGET
        self.xx += np.outer(x, x)
        self.xy *= FORGET
        self.xy += counted * x
        self.samples += 1
        if solve:
            self._solve()

    def _solve(self) -> None:
        ridge = _RIDGE * np.eye(WIDTH)
        self.weights = np.linalg.solve(self.xx + ridge, self.xy + _RIDGE * _PRIOR).tolist()


class PromptTokens:
    """Per tier, the calibrated prompt length of a request (see the module's docstring)."""

    def __init__(self, min_samples: int = 8) -> None:
        self.min_samples = min_samples
        self.tiers: dict[str, TierTokens] = {}

    def estimate(self, tier: str, features: Features) -> int:
        found = self.tiers.get(tier)
        if found is None or found.samples < self.min_samples:
            return features.prompt_tokens
        return max(1, round(found.predict(_inputs(features))))

    def observe(self, tier: str, features: Features, counted: int, solve: bool = True) -> bool:
        """Add a count ``tier`` reported; ``solve``: the weights now, else at :meth:`solve` (a
        batch of counts is solved once).  Whether the count was taken."""
        if counted <= 0:
            return False
        found = self.tiers.get(tier)
        if found is None:
            found = self.tiers[tier] = TierTokens()
        found.update(_inputs(features), float(counted), solve)
        return True

    def solve(self, tiers: Iterable[str]) -> None:
        """Solve the weights of ``tiers`` from the counts added to them."""
        for tier in tiers:
            found = self.tiers.get(tier)
            if found is not None:
                found._solve()

    def dump(self) -> dict[str, Any]:
        return {
            t: {"xx": c.xx.tolist(), "xy": c.xy.tolist(), "samples": c.samples} for t, c in self.tiers.items()
        }

    def load(self, data: dict[str, Any]) -> None:
        for tier, saved in data.items():
            xx, xy = (
                np.asarray(saved.get("xx", []), dtype=float),
                np.asarray(saved.get("xy", []), dtype=float),
            )
            if xx.shape != (WIDTH, WIDTH) or xy.shape != (WIDTH,):
                continue  # saved with other inputs: learn afresh
            found = self.tiers[tier] = TierTokens()
            found.xx, found.xy, found.samples = xx, xy, int(saved.get("samples", 0))
            found._solve()
