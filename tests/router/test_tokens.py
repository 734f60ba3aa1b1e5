"""The prompt's length in each tier's own tokens, learned from the counts the tiers report."""

from __future__ import annotations

import json
import math
import random

import pytest

import router
from router._learning.tokens import PromptTokens
from tests.router.routing import route
from tiers import Capabilities, Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})
IMAGE = TEXT | {Modality.IMAGE}


def _request(rng: random.Random) -> router.Features:
    images = rng.choice((0, 0, 1, 2))
    frames = rng.choice((0, 0, 0, 8, 16))
    media = router.MediaSummary(
        images=images, videos=int(frames > 0), video_seconds=frames / 4, video_frames=frames
    )
    return router.Features(rng.randint(5, 600), 64, 1, IMAGE if images else TEXT, False, media)


def cloud_count(f: router.Features) -> int:
    """A vision model's count: a chat template, 1.1 tokens per estimated one, 120 per image, 60 per frame."""
    return round(30 + 1.1 * f.prompt_tokens + 120 * f.media.images + 60 * f.media.video_frames)


def edge_count(f: router.Features) -> int:
    return round(25 + 0.9 * f.prompt_tokens)


def _feed(tokens: PromptTokens, rng: random.Random, n: int, extra_per_image: int = 0) -> None:
    """``n`` random requests' counts from the cloud (images costing ``extra_per_image`` more)."""
    for _ in range(n):
        f = _request(rng)
        tokens.observe("cloud", f, cloud_count(f) + extra_per_image * f.media.images)


def test_the_plain_estimate_stands_until_a_tier_has_reported_enough() -> None:
    tokens = PromptTokens(min_samples=8)
    f = router.Features(100, 64, 1, TEXT, False)
    for _ in range(7):
        tokens.observe("cloud", f, 500)
    assert tokens.estimate("cloud", f) == 100
    tokens.observe("cloud", f, 500)
    assert tokens.estimate("cloud", f) == pytest.approx(500, abs=2)
    assert tokens.estimate("edge", f) == 100  # a tier it has heard nothing from


def test_each_tier_learns_its_own_template_and_media_tokens() -> None:
    tokens = PromptTokens()
    rng = random.Random(2)
    for _ in range(200):
        f = _request(rng)
        tokens.observe("cloud", f, cloud_count(f))
        if not f.media.images and not f.media.video_frames:
            tokens.observe("edge", f, edge_count(f))
    for _ in range(100):  # requests it has not seen
        f = _request(rng)
        assert tokens.estimate("cloud", f) == pytest.approx(cloud_count(f), rel=0.02, abs=2)
        text_only = router.Features(f.prompt_tokens, 64, 1, TEXT, False)
        assert tokens.estimate("edge", text_only) == pytest.approx(edge_count(text_only), rel=0.02, abs=2)


def test_an_input_no_request_carries_keeps_its_prior_weight() -> None:
    """No request carries audio: its weight stays the prior's, not a guess from decayed nothing."""
    tokens = PromptTokens()
    rng = random.Random(3)
    _feed(tokens, rng, 5000)
    weights = tokens.tiers["cloud"].weights
    assert all(math.isfinite(w) for w in weights) and weights[4] == pytest.approx(0.0, abs=1e-6)
    f = _request(rng)
    assert tokens.estimate("cloud", f) == pytest.approx(cloud_count(f), rel=0.02, abs=2)


def test_a_new_model_is_followed() -> None:
    tokens = PromptTokens()
    rng = random.Random(4)
    _feed(tokens, rng, 300)
    _feed(tokens, rng, 600, extra_per_image=130)  # the operator swapped in a model whose images cost 250
    f = router.Features(50, 64, 1, IMAGE, False, router.MediaSummary(images=1))
    assert tokens.estimate("cloud", f) == pytest.approx(cloud_count(f) + 130, rel=0.05)


def test_the_router_learns_counts_from_usage_uses_them_and_keeps_them() -> None:
    prices = {"cloud": router.TierPrice(prompt_per_1k=1.0)}
    r = router.Learner(prices)
    caps = Capabilities(IMAGE, 4096, "vlm")
    views = [router.TierView("cloud", caps, TierState("cloud", Health.READY))]
    picture = router.Features(10, 64, 1, IMAGE, False, router.MediaSummary(images=1))
    before = route(r, "cloud", views, picture, router.DEFAULT_POLICY)
    assert before.snapshot is not None
    plain_x = dict(zip(router.FEATURE_NAMES, before.snapshot.vectors["cloud"], strict=True))
    assert plain_x["prompt_k"] == pytest.approx(0.010)
    for _ in range(10):
        d = route(r, "cloud", views, picture, router.DEFAULT_POLICY)
        r.observe(d, "cloud", 0.1, 1.0, completion_tokens=20, prompt_tokens=130)
    after = route(r, "cloud", views, picture, router.DEFAULT_POLICY)
    assert after.snapshot is not None
    x = dict(zip(router.FEATURE_NAMES, after.snapshot.vectors["cloud"], strict=True))
    assert x["prompt_k"] == pytest.approx(0.130, abs=0.002)
    # the predicted cost charges the tokens the tier will count: 130 at $1 per 1k, where 10 were guessed
    grew = after.snapshot.predictions["cloud"].cost_usd - before.snapshot.predictions["cloud"].cost_usd
    assert grew == pytest.approx(0.120, abs=0.003)
    again = router.Learner(prices)
    again.load(json.loads(json.dumps(r.dump())))
    assert again.tokens.estimate("cloud", picture) == r.tokens.estimate("cloud", picture)
    assert r.report()["prompt_tokens"]["cloud"]["samples"] == 10
