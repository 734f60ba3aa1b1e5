"""How much of ``max_tokens`` an answer will use, learned online from every answer.

Latency follows the tokens actually generated, which a request does not say: "Say hello" with
``max_tokens: 256`` stops after ten.  This is a model of the used share with a logistic link
over hashed words of the last user turn, the request's modalities and the ``max_tokens``
bucket, trained by stochastic gradient descent on each observed answer (online, written out so
one update or prediction costs microseconds).  It learns the *median* share (the gradient of
the absolute error, a quantile regression at 0.5): answers to one kind of request usually run to
``max_tokens`` and now and then stop early, and the median latency is the latency of the median
answer, where the mean share would put every prediction below the usual answer.  The latency
predictors then see the expected output, not the ceiling.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

BUCKETS = 1 << 12
_WORD = re.compile(r"[a-z0-9_]+")
_MAX_CHARS = 2000


def _sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


def output_keys(text: str, max_tokens: int | None, modalities: Iterable[str] = ()) -> tuple[int, ...]:
    """The hashed features of a request for :class:`OutputShare` (``modalities``: their names)."""
    words = set(_WORD.findall(text[:_MAX_CHARS].lower()))
    words.update(f"modality:{m}" for m in modalities)
    ceiling = max_tokens or 0
    words.add(
        f"max_tokens<={1 << max(3, math.ceil(math.log2(ceiling or 1)))}" if ceiling else "max_tokens:none"
    )
    return tuple(sorted({zlib.crc32(w.encode()) & (BUCKETS - 1) for w in words}))


class OutputShare:
    def __init__(self, prior: float = 0.6, learning_rate: float = 0.3) -> None:
        self.weights = [0.0] * BUCKETS
        self.bias = math.log(prior / (1 - prior))
        self.learning_rate = learning_rate
        self.updates = 0

    def predict(self, keys: Sequence[int]) -> float:
        scale = 1 / math.sqrt(len(keys)) if keys else 0.0
        w = self.weights
        return _sigmoid(self.bias + scale * sum(w[k] for k in keys))

    def update(self, keys: Sequence[int], share: float) -> None:
        """One SGD step of the absolute error towards the observed share (0..1): the model
        converges to the median share of requests like these."""
        share = min(1.0, max(0.0, share))
        predicted = self.predict(keys)
        gradient = self.learning_rate * (0.5 if share > predicted else -0.5 if share < predicted else 0.0)
        scale = 1 / math.sqrt(len(keys)) if keys else 0.0
        self.bias += gradient * 0.2
        for k in keys:
            self.weights[k] += gradient * scale
        self.updates += 1

    def dump(self) -> dict[str, Any]:
        nonzero = {str(i): w for i, w in enumerate(self.weights) if w}
        return {"bias": self.bias, "weights": nonzero, "updates": self.updates}

    def load(self, data: dict[str, Any]) -> None:
        self.bias = float(data.get("bias", self.bias))
        self.weights = [0.0] * BUCKETS
        for i, w in data.get("weights", {}).items():
            self.weights[int(i)] = float(w)
        self.updates = int(data.get("updates", 0))
