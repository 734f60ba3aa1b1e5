"""Predicted cost of a request on a tier, from the configured price table.

Cloud tiers are priced per token and/or per GPU-second, edge tiers as amortised machine cost
(per token, or per second of the machine); media per image and per media second.  The
output is not known before it is generated: it is ``max_tokens`` × the share of it answers to
requests like this one have used (:mod:`router._learning.output`).
"""

from __future__ import annotations

from dataclasses import dataclass

from router._features import Features
from router._learning.predictor import DEFAULT_OUTPUT_TOKENS


@dataclass(frozen=True, slots=True)
class TierPrice:
    """USD per unit; the same fields as the ledger's price table."""

    prompt_per_1k: float = 0.0
    completion_per_1k: float = 0.0
    per_image: float = 0.0
    per_media_second: float = 0.0
    per_gpu_second: float = 0.0

    def estimate(
        self, features: Features, share: float, seconds: float, prompt_tokens: int | None = None
    ) -> float:
        """USD for ``features`` whose answer uses ``share`` of max_tokens and takes ``seconds``
        (``prompt_tokens``: the prompt's length in the tier's tokens, else the plain estimate)."""
        out = (features.max_tokens or DEFAULT_OUTPUT_TOKENS) * share
        media = features.media
        prompt = features.prompt_tokens if prompt_tokens is None else prompt_tokens
        return (
            prompt * self.prompt_per_1k / 1000
            + out * self.completion_per_1k / 1000
            + media.images * self.per_image
            + (media.video_seconds + media.audio_seconds) * self.per_media_second
            + seconds * self.per_gpu_second
        )


FREE = TierPrice()
