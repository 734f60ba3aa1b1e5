"""The routing decision: a pure function of (features, tier views, rule) → decision with a reason."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import msgspec

from router._breaker import attributed
from router._features import Features
from router._predictor import Prediction
from tiers import Capabilities, Health, Modality, TierState

EDGE = "edge"
CLOUD = "cloud"


class AutoRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The first, explicit rule for ``tiergate-auto`` (until the learned router replaces it).

    A request goes to the edge model when it is small: its prompt is at most
    ``edge_max_prompt_tokens`` (estimated) and it asks for at most
    ``edge_max_output_tokens`` new tokens, and the edge takes every modality it
    carries.  Everything else goes to the cloud pool.  If the chosen tier is
    not ready, the other one serves the request when it can.
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

    @property
    def ready(self) -> bool:
        return self.state.health is Health.READY


@dataclass(frozen=True, slots=True)
class RouteDetail:
    """What the learned router saw when it decided: per tier, the feature vector and the
    prediction (so the outcome can be learned from), and the request's difficulty."""

    features: Features
    vectors: Mapping[str, tuple[float, ...]]
    predictions: Mapping[str, Prediction]
    difficulty: float | None = None
    strategy: str = ""
    output_keys: tuple[int, ...] = ()  # the request's features for the output-share model
    output_share: float = 1.0  # the share of max_tokens its answer was expected to use
    ticket: int = 0  # its entry in the router's book of work in hand at the chosen tier


@dataclass(frozen=True, slots=True)
class Decision:
    tier: str
    fallbacks: tuple[str, ...]
    reason: str
    detail: RouteDetail | None = None


class NoTierAvailable(Exception):
    """No tier can serve this request now; the message says why."""


class RequestDoesNotFit(NoTierAvailable):
    """No configured tier could ever take this request (a modality none accepts, too long)."""


def cannot_take(view: TierView, features: Features) -> str | None:
    """Why ``view`` could never take the request, whatever its state, or None."""
    missing = features.modalities - view.capabilities.modalities
    if missing:
        return f"{view.name} does not accept {', '.join(sorted(m.value for m in missing))}"
    if over := _over_media_limits(view, features):
        return over
    needed = features.prompt_tokens + (features.max_tokens or 1)
    if needed > view.capabilities.max_context_tokens:
        return (
            f"{view.name} context is {view.capabilities.max_context_tokens} tokens, "
            f"the request needs ~{needed}"
        )
    return None


def _over_media_limits(view: TierView, features: Features) -> str | None:
    """Which of the tier's media limits the request passes, or None."""
    media, limits = features.media, view.capabilities.limits
    if limits.max_images is not None and media.images > limits.max_images:
        return f"{view.name} takes at most {limits.max_images} images, the request has {media.images}"
    if (
        limits.max_image_pixels is not None
        and media.images
        and media.image_pixels > limits.max_image_pixels * media.images
    ):
        return f"{view.name} takes images of at most {limits.max_image_pixels} pixels"
    if limits.max_video_seconds is not None and media.video_seconds > limits.max_video_seconds:
        return (
            f"{view.name} takes at most {limits.max_video_seconds:g} s of video, "
            f"the request has {media.video_seconds:.1f} s"
        )
    if limits.max_audio_seconds is not None and media.audio_seconds > limits.max_audio_seconds:
        return (
            f"{view.name} takes at most {limits.max_audio_seconds:g} s of audio, "
            f"the request has {media.audio_seconds:.1f} s"
        )
    return None


def why_not(view: TierView, features: Features) -> str | None:
    """Why ``view`` cannot take the request now, or None if it can."""
    if why := cannot_take(view, features):
        return why
    if not view.ready:
        return f"{view.name} is {view.state.health.value}"
    if broken := attributed(features.modalities) & view.open_breakers:
        return f"{view.name} {', '.join(sorted(m.value for m in broken))} breaker is open"
    return None


def unavailable(views: Sequence[TierView], features: Features) -> NoTierAvailable:
    why = "; ".join(w for v in views if (w := why_not(v, features)))
    if all(cannot_take(v, features) for v in views):
        return RequestDoesNotFit(why)
    return NoTierAvailable(why)


def pinned(name: str, views: Sequence[TierView], features: Features) -> Decision:
    """The client named a tier: use it or say why not; never move the request elsewhere."""
    for view in views:
        if view.name == name:
            if why_not(view, features) is not None:
                raise unavailable([view], features)
            return Decision(name, (), f"{name}: pinned by model name")
    raise NoTierAvailable(f"{name} is not configured")


def auto(rule: AutoRule, views: Sequence[TierView], features: Features) -> Decision:
    able = {v.name: v for v in views if why_not(v, features) is None}
    if not able:
        raise unavailable(views, features)
    max_out = features.max_tokens
    small = features.prompt_tokens <= rule.edge_max_prompt_tokens and (
        max_out is not None and max_out <= rule.edge_max_output_tokens
    )
    if small:
        size = (
            f"prompt ~{features.prompt_tokens} <= {rule.edge_max_prompt_tokens} tokens, "
            f"max_tokens {max_out} <= {rule.edge_max_output_tokens}"
        )
        preferred, other = EDGE, CLOUD
    else:
        if features.prompt_tokens > rule.edge_max_prompt_tokens:
            size = f"prompt ~{features.prompt_tokens} > {rule.edge_max_prompt_tokens} tokens"
        elif max_out is None:
            size = "max_tokens not set"
        else:
            size = f"max_tokens {max_out} > {rule.edge_max_output_tokens}"
        preferred, other = CLOUD, EDGE
    if preferred in able:
        fallbacks = (other,) if other in able else ()
        return Decision(preferred, fallbacks, f"{preferred}: {size}")
    # The preferred tier cannot take it: say why, and use one that can.
    view = next((v for v in views if v.name == preferred), None)
    why = why_not(view, features) if view is not None else f"{preferred} is not configured"
    chosen, *rest = able
    return Decision(chosen, tuple(rest), f"{chosen}: {why}")


def _candidates(model: str, views: Sequence[TierView]) -> Sequence[TierView]:
    return [v for v in views if v.name == model] if model in (EDGE, CLOUD) else views


def to_degrade(model: str, views: Sequence[TierView], features: Features) -> frozenset[Modality]:
    """The media modalities a request for ``model`` must lose to be served now.

    A modality is lost when some candidate tier accepts it but every candidate that
    does has its breaker for it open.  A modality no tier accepts at all is not
    degraded (the request does not fit), and text is never lost.
    """
    out = set()
    candidates = _candidates(model, views)
    for m in features.modalities - {Modality.TEXT}:
        accepting = [v for v in candidates if m in v.capabilities.modalities]
        if accepting and all(m in v.open_breakers for v in accepting):
            out.add(m)
    return frozenset(out)


def decide(model: str, rule: AutoRule, views: Sequence[TierView], features: Features) -> Decision:
    """Route a request for ``model`` (``tiergate-auto`` or a tier's name)."""
    if model in (EDGE, CLOUD):
        return pinned(model, views, features)
    return auto(rule, views, features)
