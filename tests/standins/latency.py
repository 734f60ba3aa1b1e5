"""An optional latency model for the provider stand-ins: how long a hosted model takes to begin its
answer and to stream each token, and how long the answer runs, drawn per request from seeded
distributions, so a benchmark's router meets a tier whose latency it has to learn from what it sees.

* time to first token: lognormal, median ``ttft_median_s``, shape ``ttft_sigma`` (the standard
  deviation of its logarithm);
* streaming speed: one rate per request, uniform in ``[tokens_per_s_low, tokens_per_s_high]``; every
  token after the first takes ``1 / rate``;
* answer length (``answer_median_tokens`` > 0): lognormal, median ``answer_median_tokens``, shape
  ``answer_sigma``, cut at the request's ``max_tokens`` as the provider does (finish reason
  ``length``); 0 leaves the stand-in's own echo length.

A non-streamed answer is sent whole after ``ttft + (tokens - 1) / rate``; a streamed one sends its
first chunk after ``ttft`` and each later token's chunk ``1 / rate`` after the one before.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Timing:
    """One request's draw."""

    ttft_s: float
    per_token_s: float
    tokens: int | None  # the answer's natural length (before max_tokens), None: the stand-in's own


@dataclass
class LatencyModel:
    ttft_median_s: float = 0.5
    ttft_sigma: float = 0.4
    tokens_per_s_low: float = 60.0
    tokens_per_s_high: float = 100.0
    answer_median_tokens: int = 0
    answer_sigma: float = 0.6
    seed: int = 1
    _rng: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0 < self.tokens_per_s_low <= self.tokens_per_s_high:
            raise ValueError("tokens_per_s_low must be > 0 and <= tokens_per_s_high")
        if self.ttft_median_s < 0 or self.ttft_sigma < 0 or self.answer_sigma < 0:
            raise ValueError("medians and shapes must be >= 0")
        self._rng = random.Random(self.seed)

    def draw(self) -> Timing:
        with self._lock:  # one seeded sequence, whichever thread serves the request
            ttft = self.ttft_median_s * math.exp(self._rng.gauss(0.0, self.ttft_sigma))
            rate = self._rng.uniform(self.tokens_per_s_low, self.tokens_per_s_high)
            tokens = None
            if self.answer_median_tokens > 0:
                natural = self.answer_median_tokens * math.exp(self._rng.gauss(0.0, self.answer_sigma))
                tokens = max(1, round(natural))
        return Timing(ttft, 1.0 / rate, tokens)
