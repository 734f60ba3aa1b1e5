"""A request goes only to a tier whose media limits take all of it."""

from __future__ import annotations

import pytest

import router
from tiers import Capabilities, Health, MediaLimits, Modality, TierState

VISION = frozenset({Modality.TEXT, Modality.IMAGE, Modality.VIDEO, Modality.AUDIO})


def _view(name: str, limits: MediaLimits) -> router.TierView:
    return router.TierView(
        name, Capabilities(VISION, 4096, f"{name}-model", limits), TierState(name, Health.READY)
    )


RULE_ONLY = router.TenantPolicy(strategy="rule")


def _features(media: router.MediaSummary, pinned: str | None = None) -> router.Features:
    modalities = {Modality.TEXT}
    if media.images:
        modalities.add(Modality.IMAGE)
    if media.videos:
        modalities.add(Modality.VIDEO)
    if media.audio_clips:
        modalities.add(Modality.AUDIO)
    return router.Features.estimate(
        text_chars=40,
        turns=1,
        max_tokens=600,
        modalities=frozenset(modalities),
        stream=False,
        media=media,
        pinned=pinned,
    )


SMALL = MediaLimits(max_images=2, max_image_pixels=100_000, max_video_seconds=10, max_audio_seconds=30)
LARGE = MediaLimits(max_images=16, max_image_pixels=1_000_000, max_video_seconds=600, max_audio_seconds=600)


@pytest.mark.parametrize(
    ("media", "why"),
    [
        (router.MediaSummary(images=3, image_pixels=30_000), "at most 2 images"),
        (router.MediaSummary(images=1, image_pixels=400_000), "100000 pixels"),
        (router.MediaSummary(videos=1, video_seconds=42.0, video_frames=8), "10 s of video"),
        (router.MediaSummary(audio_clips=1, audio_seconds=31.0), "30 s of audio"),
    ],
)
def test_a_tier_whose_limits_the_media_pass_is_skipped_and_the_reason_says_so(
    media: router.MediaSummary, why: str
) -> None:
    views = [_view("edge", SMALL), _view("cloud", LARGE)]
    decision = router.Router().decide(_features(media), views, RULE_ONLY)
    assert decision.tier == "cloud" and decision.fallbacks == ()
    with pytest.raises(router.RequestDoesNotFit, match=why):
        router.Router().decide(_features(media, pinned="edge"), views, RULE_ONLY)


def test_media_within_the_limits_may_go_to_either_tier() -> None:
    media = router.MediaSummary(
        images=2, image_pixels=150_000, videos=1, video_seconds=9.0, audio_clips=1, audio_seconds=5
    )
    decision = router.Router().decide(
        _features(media), [_view("edge", SMALL), _view("cloud", LARGE)], RULE_ONLY
    )
    assert {decision.tier, *decision.fallbacks} == {"edge", "cloud"}


def test_no_limits_means_no_limit_of_the_tiers_own() -> None:
    media = router.MediaSummary(images=50, image_pixels=50 * 4_000_000, videos=1, video_seconds=3600.0)
    decision = router.Router().decide(
        _features(media, pinned="cloud"), [_view("cloud", MediaLimits())], RULE_ONLY
    )
    assert decision.tier == "cloud"
