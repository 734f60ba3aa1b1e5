"""What the router knows about a request: cheap numbers taken from its messages."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tiers import Ability, Modality

# About four characters of English per token for the SmolLM2/Gemma tokenizers, plus
# the chat template's few tokens per turn.
CHARS_PER_TOKEN = 4.0
TOKENS_PER_TURN = 4


@dataclass(frozen=True, slots=True)
class MediaSummary:
    """How much media a request carries, as the preprocessing stage measured it."""

    images: int = 0
    image_pixels: int = 0  # summed over images, after resize
    videos: int = 0
    video_seconds: float = 0.0
    video_frames: int = 0  # frames sampled and forwarded
    audio_clips: int = 0
    audio_seconds: float = 0.0


NO_MEDIA = MediaSummary()


@dataclass(frozen=True, slots=True)
class Features:
    prompt_tokens: int  # an estimate
    max_tokens: int | None
    turns: int
    modalities: frozenset[Modality]
    stream: bool
    media: MediaSummary = NO_MEDIA
    tenant: str = ""
    hour: int = 0  # UTC hour of day when the request arrived
    text: str = ""  # the last user turn's text, for the difficulty estimate (not copied)
    pinned: str | None = None  # the tier the client named; None: the router chooses
    needs: frozenset[Ability] = frozenset()  # what the request asks beyond text (tools, a JSON schema, ...)
    strategy: str | None = None  # a model alias's routing strategy, over the tenant policy's
    # The residency rule that keeps the request on tiers marked local (None: any tier may serve it).
    kept_local: str | None = None
    # The request's cost tags (metadata and X-Tiergate-Tags): a spent tag budget governs it.
    tags: Mapping[str, str] | None = None
    # Nobody waits for the answer (a batch line, due in hours): the policy's latency objective does
    # not bind it, so the cheapest tier that meets the quality floor may take it.
    relaxed: bool = False

    @classmethod
    def estimate(
        cls,
        *,
        text_chars: int,
        turns: int,
        max_tokens: int | None,
        modalities: frozenset[Modality],
        stream: bool,
        media: MediaSummary = NO_MEDIA,
        tenant: str = "",
        hour: int = 0,
        text: str = "",
        pinned: str | None = None,
        needs: frozenset[Ability] = frozenset(),
        strategy: str | None = None,
    ) -> Features:
        prompt = int(text_chars / CHARS_PER_TOKEN) + TOKENS_PER_TURN * turns
        return cls(
            prompt, max_tokens, turns, modalities, stream, media, tenant, hour, text, pinned, needs, strategy
        )
