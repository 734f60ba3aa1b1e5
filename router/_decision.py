"""The routing decision's values and the checks that say which tiers can take a request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec

from router._breaker import attributed
from router._features import Features
from router._reason import (
    BreakerOpen,
    ContextTooSmall,
    Exclusion,
    KeptLocal,
    Lacks,
    NotAccepted,
    NotReady,
    OverMediaLimit,
    Reason,
)
from router._snapshot import Snapshot
from tiers import Capabilities, Health, Modality, TierState


class AutoRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The first, explicit rule for ``tiergate-auto`` (the ``rule`` strategy).

    A request goes to the small model when it is small: its prompt is at most
    ``edge_max_prompt_tokens`` (estimated) and it asks for at most
    ``edge_max_output_tokens`` new tokens.  Everything else goes to the large model.
    The small model is the tier of the lowest declared quality (of equals, the first
    configured), the large one that of the highest (of equals, the last configured): on the
    embedded defaults, the edge and the cloud.  If the chosen tier cannot take the request,
    the next in that order that can serves it.
    """

    edge_max_prompt_tokens: int = 512
    edge_max_output_tokens: int = 256


@dataclass(frozen=True, slots=True)
class TierView:
    """What the router may know about a tier: what it accepts and how it is now."""

    name: str
    capabilities: Capabilities
    state: TierState
    # Modalities whose circuit breaker on this tier is open: not a candidate for requests carrying them.
    open_breakers: frozenset[Modality] = frozenset()
    local: bool = True  # configured location "local": residency rules may keep requests here

    @property
    def ready(self) -> bool:
        return self.state.health is Health.READY


@dataclass(frozen=True, slots=True)
class Decision:
    tier: str
    fallbacks: tuple[str, ...]
    reason: Reason
    strategy: str = ""  # the strategy that chose (``pinned`` when the client named the tier)
    snapshot: Snapshot | None = None  # what the learner knew when it was decided


class NoTierAvailable(Exception):
    """No tier can serve this request now; the message says why."""


class RequestDoesNotFit(NoTierAvailable):
    """No configured tier could ever take this request (a modality none accepts, too long); the
    ``exclusions`` say why each could not."""

    def __init__(self, message: str, exclusions: tuple[Exclusion, ...] = ()) -> None:
        super().__init__(message)
        self.exclusions = exclusions


def cannot_take(view: TierView, features: Features) -> Exclusion | None:
    """Why ``view`` could never take the request, whatever its state, or None."""
    missing = features.modalities - view.capabilities.modalities
    if missing:
        return NotAccepted(view.name, missing)
    if lacking := features.needs - view.capabilities.abilities:
        return Lacks(view.name, lacking)
    if features.kept_local is not None and not view.local:
        return KeptLocal(view.name, features.kept_local)
    if over := _over_media_limits(view, features):
        return over
    needed = features.prompt_tokens + (features.max_tokens or 1)
    if needed > view.capabilities.max_context_tokens:
        return ContextTooSmall(view.name, view.capabilities.max_context_tokens, needed)
    return None


def _over_media_limits(view: TierView, features: Features) -> OverMediaLimit | None:
    """Which of the tier's media limits the request passes, or None."""
    media, limits = features.media, view.capabilities.limits
    if limits.max_images is not None and media.images > limits.max_images:
        return OverMediaLimit(view.name, "images", limits.max_images, media.images)
    if (
        limits.max_image_pixels is not None
        and media.images
        and media.image_pixels > limits.max_image_pixels * media.images
    ):
        return OverMediaLimit(view.name, "image_pixels", limits.max_image_pixels)
    if limits.max_video_seconds is not None and media.video_seconds > limits.max_video_seconds:
        return OverMediaLimit(view.name, "video", limits.max_video_seconds, media.video_seconds)
    if limits.max_audio_seconds is not None and media.audio_seconds > limits.max_audio_seconds:
        return OverMediaLimit(view.name, "audio", limits.max_audio_seconds, media.audio_seconds)
    return None


def why_not(view: TierView, features: Features) -> Exclusion | None:
    """Why ``view`` cannot take the request now, or None if it can."""
    if why := cannot_take(view, features):
        return why
    if not view.ready:
        return NotReady(view.name, view.state.health)
    if broken := attributed(features.modalities) & view.open_breakers:
        return BreakerOpen(view.name, broken)
    return None


def unavailable(views: Sequence[TierView], features: Features) -> NoTierAvailable:
    why = "; ".join(str(w) for v in views if (w := why_not(v, features)))
    never = [cannot_take(v, features) for v in views]
    if all(never):
        return RequestDoesNotFit(why, tuple(e for e in never if e is not None))
    return NoTierAvailable(why)


def to_degrade(views: Sequence[TierView], features: Features) -> frozenset[Modality]:
    """The media modalities a request must lose to be served now.

    A modality is lost when some candidate tier (the pinned one, else all) accepts it but
    every candidate that does has its breaker for it open.  A modality no tier accepts at all
    is not degraded (the request does not fit), and text is never lost.
    """
    out = set()
    pinned = features.pinned
    candidates = views if pinned is None else [v for v in views if v.name == pinned]
    for m in features.modalities - {Modality.TEXT}:
        accepting = [v for v in candidates if m in v.capabilities.modalities]
        if accepting and all(m in v.open_breakers for v in accepting):
            out.add(m)
    return frozenset(out)
