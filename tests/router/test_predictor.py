"""Latency predictors: features, fit on held-out data, online correction, persistence; and the
difficulty classifier (built-in default, training from labelled examples)."""

from __future__ import annotations

import json
import math
import random

import msgspec
import pytest

import router
from router._learning.predictor import TierPredictor
from tests.router.routing import route
from tiers import Health, Modality, TierState

TEXT = frozenset({Modality.TEXT})


def test_the_feature_vector_carries_size_media_and_live_load() -> None:
    media = router.MediaSummary(images=2, image_pixels=500_000, videos=1, video_seconds=3.0, video_frames=12)
    f = router.Features(300, 128, 3, TEXT | {Modality.IMAGE, Modality.VIDEO}, True, media)
    x = dict(
        zip(router.FEATURE_NAMES, router.design(f, TierState("edge", Health.READY, 1, 2), 2.0), strict=True)
    )
    assert x["prompt_k"] == 0.3 and x["out_k"] == 0.128 and x["out_k_x_load"] == 0.128 * 3
    assert (
        x["busy_s"] == 2.0
        and x["ahead_s"] == 4.0
        and x["images"] == 2
        and x["pixels_m"] == 0.5
        and x["media_s"] == 3
        and x["frames"] == 12
    )
    unset = router.Features(10, None, 1, TEXT, False)
    assert router.design(unset, TierState("e", Health.READY), 1.0)[2] == 0.256  # no max_tokens: 256 assumed


def test_features_estimate_keeps_tenant_hour_and_text() -> None:
    f = router.Features.estimate(
        text_chars=400, turns=2, max_tokens=8, modalities=TEXT, stream=True, tenant="acme", hour=7, text="hi"
    )
    assert (f.prompt_tokens, f.tenant, f.hour, f.text) == (108, "acme", 7, "hi")


def synthetic(n: int, seed: int = 0) -> list[list[object]]:
    """A tier that takes 0.2 s + 1 ms per prompt token + 40 ms per output token, plus 1.5 s per
    queued request, with ±10% noise."""
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        f = router.Features(rng.randint(10, 800), rng.choice((16, 64, 128, 256)), 1, TEXT, True)
        queued = rng.choice((0, 0, 1, 2))
        x = router.design(f, TierState("t", Health.READY, 1, queued), 1.5)
        ttft = (0.2 + f.prompt_tokens * 0.001 + 1.5 * queued) * rng.uniform(0.9, 1.1)
        total = ttft + f.max_tokens * 0.04 * rng.uniform(0.9, 1.1)
        rows.append([list(x), ttft, total])
    return rows


def test_fit_predicts_held_out_requests_within_15_percent() -> None:
    config = router.PredictorConfig(min_samples=20)
    fitted = router.fit_tier(synthetic(400), {"min_samples": 20})
    assert fitted["metrics"]["total_holdout_mape"] < 0.15
    assert fitted["metrics"]["ttft_holdout_mape"] < 0.15
    assert 0.85 <= fitted["metrics"]["total_holdout_coverage"] <= 1.0  # the 95% quantile covers ~95%
    p = TierPredictor(config)
    r = router.Learner({})
    r.predictors["t"] = p
    r.adopt("t", fitted)
    errors = []
    for x, _ttft, total in synthetic(200, seed=9):  # requests it never saw
        t50, thi, tot50, tothi = p.predict(x)
        assert thi >= t50 and tothi >= tot50
        errors.append(abs(tot50 - total) / total)
    assert sum(errors) / len(errors) < 0.15


def test_the_online_correction_follows_a_tier_that_slows_down() -> None:
    p = TierPredictor(router.PredictorConfig())
    p.adopt(
        router._learning.predictor.Coefficients(
            **{k: v for k, v in router.fit_tier(synthetic(300), {}).items()}
        )
    )
    rows = synthetic(60, seed=5)
    before = [abs(p.predict(x)[2] - 2 * total) / (2 * total) for x, _, total in rows[:10]]
    for x, ttft, total in rows:
        t50, _, tot50, _ = p.predict(x)  # what the router predicted when it routed the request
        p.observe(x, 2 * ttft, 2 * total, (t50, tot50))  # the machine got twice as slow
    after = [abs(p.predict(x)[2] - 2 * total) / (2 * total) for x, _, total in synthetic(20, seed=6)]
    assert sum(before) / 10 > 0.3 and sum(after) / 20 < 0.15
    assert math.exp(p.correction["total"]) == pytest.approx(2, rel=0.15)
    assert p.live_mape("total") is not None and len(p.window) == 60


def test_refits_are_due_after_enough_new_observations() -> None:
    r = router.Learner({}, predictor=router.PredictorConfig(min_samples=10, refit_every=5))
    p = r.predictor("edge")
    for x, ttft, total in synthetic(9):
        p.observe(x, ttft, total)
    assert r.due() == []
    p.observe(*synthetic(1)[0])
    ((tier, window),) = r.due()
    assert tier == "edge" and len(window) == 10
    r.adopt("edge", router.fit_tier(window, {"min_samples": 10}))
    assert r.due() == [] and r.version == 1
    for x, ttft, total in synthetic(5):
        p.observe(x, ttft, total)
    assert [t for t, _ in r.due()] == ["edge"]


def test_what_was_learned_survives_a_dump_and_load() -> None:
    r = router.Learner({})
    p = r.predictor("cloud")
    for x, ttft, total in synthetic(50):
        p.observe(x, ttft, total)
    r.adopt("cloud", router.fit_tier(msgspec.to_builtins(list(p.window)), {}))
    p.observe(*synthetic(1, seed=4)[0])
    dumped = json.loads(json.dumps(r.dump()))
    again = router.Learner({})
    again.load(dumped)
    x = synthetic(1, seed=8)[0][0]
    assert again.predictor("cloud").predict(x) == pytest.approx(p.predict(x))
    assert again.version == 1 and len(again.predictor("cloud").window) == 51
    with pytest.raises(ValueError):
        again.load({"format": 99})


def test_the_prediction_at_a_percentile_interpolates_between_median_and_high() -> None:
    p = router.Prediction(0.1, 0.2, 1.0, 2.0, 0.95)
    assert p.at("total", 50) == 1.0 and p.at("total", 95) == pytest.approx(2.0)
    assert 1.0 < p.at("total", 90) < 2.0 < p.at("total", 99)
    assert p.at("ttft", 95) == pytest.approx(0.2)


def test_the_builtin_difficulty_model_tells_easy_from_hard() -> None:
    model = router.builtin_model()
    f = router.Features(20, 64, 1, TEXT, False)
    assert model.estimate("Say hello to my friend.", f) < 0.3
    assert model.estimate("Prove that the sum of the first n odd numbers is n^2, step by step.", f) > 0.5
    assert model.metrics["holdout_accuracy"] > 0.9


def test_training_difficulty_from_labelled_jsonl() -> None:
    lines = []
    for i in range(40):
        lines.append(json.dumps({"prompt": f"tell me about cats number {i}", "label": "easy"}))
        messages = [{"role": "user", "content": f"integrate the differential equation system {i}"}]
        lines.append(json.dumps({"messages": messages, "label": 1, "max_tokens": 512}))
    model = router.train(router.read_examples(lines), source="test.jsonl")
    f = router.Features(20, 64, 1, TEXT, False)
    assert model.estimate("integrate the differential equation", f) > 0.5 > model.estimate("about cats", f)
    assert model.examples == 80 and model.metrics["holdout_accuracy"] >= 0.9
    with pytest.raises(ValueError, match="line 1"):
        router.read_examples(['{"prompt": "x", "label": "maybe"}'])
    with pytest.raises(ValueError, match="both labels"):
        router.train(router.read_examples(['{"prompt": "x", "label": 1}'] * 10), source="x")


def test_the_output_share_learns_which_requests_stop_early() -> None:
    from router._learning.output import OutputShare, output_keys

    model = OutputShare()
    chat, story = (
        output_keys("say hello to ada", 256),
        output_keys("write a long story about a lighthouse", 256),
    )
    assert model.predict(chat) == pytest.approx(model.predict(story))
    for _ in range(200):
        model.update(chat, 12 / 256)
        model.update(story, 1.0)
    assert model.predict(chat) < 0.15 and model.predict(story) > 0.85
    assert model.predict(output_keys("say hello to grace", 256)) < 0.5  # the words carry over
    again = OutputShare()
    again.load(json.loads(json.dumps(model.dump())))
    assert again.predict(chat) == pytest.approx(model.predict(chat))


def test_the_output_share_is_the_median_share_so_the_usual_answer_is_predicted() -> None:
    """Seven answers in ten run to max_tokens, three stop at a tenth: the median is all of it
    (the mean, 0.73, would under-predict the usual answer by a quarter)."""
    from router._learning.output import OutputShare, output_keys

    model = OutputShare()
    keys = output_keys("write a story about a robot gardener", 48)
    for i in range(400):
        model.update(keys, 1.0 if i % 10 < 7 else 0.1)
    assert model.predict(keys) > 0.9
    early = output_keys("say hello to ada", 48)
    for i in range(400):
        model.update(early, 0.2 if i % 10 < 7 else 1.0)
    assert 0.1 < model.predict(early) < 0.35


def test_the_output_share_tells_modalities_apart() -> None:
    from router._learning.output import OutputShare, output_keys

    model = OutputShare()
    video = output_keys("describe this", 64, ["text", "video"])
    image = output_keys("describe this", 64, ["text", "image"])
    assert video != image
    for _ in range(300):
        model.update(video, 1 / 64)
        model.update(image, 1.0)
    assert model.predict(video) < 0.2 and model.predict(image) > 0.8


def test_the_router_feeds_the_expected_output_to_the_latency_model() -> None:
    r = router.Learner({})
    views = [
        router.TierView(
            "edge", router._decision.Capabilities(TEXT, 4096, "m"), TierState("edge", Health.READY)
        )
    ]
    f = router.Features(10, 200, 1, TEXT, False, text="say hello")
    for _ in range(100):
        d = route(r, "edge", views, f, router.DEFAULT_POLICY)
        r.observe(d, "edge", None, 0.5, 10)
    d = route(r, "edge", views, f, router.DEFAULT_POLICY)
    assert d.snapshot is not None and d.snapshot.output_share < 0.2
    assert d.snapshot.vectors["edge"][router.FEATURE_NAMES.index("out_k")] < 0.2 * 200 / 1000


def test_the_load_on_the_other_tiers_is_a_feature() -> None:
    """Co-located tiers share cores: the edge slows down while the cloud is busy."""
    r = router.Learner({})
    busy = TierState("cloud", Health.READY, in_flight=3, queued=1)
    views = [
        router.TierView(
            "edge", router._decision.Capabilities(TEXT, 4096, "m"), TierState("edge", Health.READY)
        ),
        router.TierView("cloud", router._decision.Capabilities(TEXT, 4096, "m"), busy),
    ]
    d = route(r, "tiergate-auto", views, router.Features(10, 100, 1, TEXT, False), router.DEFAULT_POLICY)
    assert d.snapshot is not None
    edge = dict(zip(router.FEATURE_NAMES, d.snapshot.vectors["edge"], strict=True))
    cloud = dict(zip(router.FEATURE_NAMES, d.snapshot.vectors["cloud"], strict=True))
    assert edge["others_load"] == 4 and edge["busy_s"] == 0 and cloud["others_load"] == 0
    assert cloud["busy_s"] == 3 * r.predictor("cloud").mean_service_s and cloud["out_k_x_load"] > 0
    stale = {"format": 1, "tiers": {"edge": {"coefficients": None, "window": [[[1.0] * 10, None, 1.0]]}}}
    fresh = router.Learner({})
    fresh.load(stale)  # a file written with fewer features is ignored, not misread
    assert "edge" not in fresh.predictors


def test_observing_is_cheap_bookkeeping_scored_against_the_prediction_made_when_routed() -> None:
    """observe() predicts nothing: it keeps the routed prediction beside what happened, and
    live MAPE is computed from those pairs when asked."""
    calls = []

    class Counting(TierPredictor):
        def predict(self, x):  # type: ignore[no-untyped-def]
            calls.append(x)
            return super().predict(x)

    p = Counting(router.PredictorConfig())
    rows = synthetic(10)
    for x, ttft, total in rows:
        p.observe(x, ttft, total, (ttft * 1.2, total * 0.5))
    p.observe(rows[0][0], None, 2.0)  # no prediction: kept, not scored
    assert calls == [] and len(p.window) == 11
    assert p.live_mape("ttft") == pytest.approx(0.2) and p.live_mape("total") == pytest.approx(0.5)
    assert p.window[0].predicted_total == pytest.approx(rows[0][2] * 0.5)
    assert math.exp(p.correction["total"]) > 1.5  # observed twice the prediction: it corrects upwards


def test_the_mean_service_time_learns_only_from_requests_that_found_the_tier_idle() -> None:
    p = TierPredictor(router.PredictorConfig())
    f = router.Features(50, 64, 1, TEXT, False)
    idle = router.design(f, TierState("edge", Health.READY), p.mean_service_s)
    queued = router.design(f, TierState("edge", Health.READY, 1, 3), p.mean_service_s)
    for _ in range(50):
        p.observe(queued, None, 20.0)  # waited behind four others
    assert p.mean_service_s == 1.0
    for _ in range(50):
        p.observe(idle, None, 2.0)
    assert p.mean_service_s == pytest.approx(2.0, rel=0.01)


def test_fitted_coefficients_are_non_negative_and_extrapolate_sanely() -> None:
    """Few, collinear observations (like a small calibration) gave negative coefficients and
    predictions floored at 10 ms; the constrained fit keeps every feature's time >= 0."""
    rng = random.Random(2)
    rows = []
    for _ in range(16):
        f = router.Features(rng.randint(10, 600), rng.choice((8, 32, 96, 256)), 1, TEXT, True)
        x = router.design(f, TierState("t", Health.READY, rng.choice((0, 1)), 0), 1.0)
        total = (0.1 + 0.035 * f.max_tokens) * rng.uniform(0.7, 1.4)
        rows.append([list(x), 0.1 * rng.uniform(0.7, 1.4), total])
    fitted = router.fit_tier(rows, {"min_samples": 8})
    for target in ("ttft", "total"):
        for coefficients in fitted[target]:
            assert min(coefficients) >= -1e-9
    p = TierPredictor(router.PredictorConfig())
    p.adopt(msgspec.convert(fitted, router._learning.predictor.Coefficients))
    for out in (8, 24, 48, 256):
        x = router.design(router.Features(40, out, 1, TEXT, True), TierState("t", Health.READY), 1.0)
        _, _, total, _ = p.predict(x)
        assert 0.5 < total / (0.1 + 0.035 * out) < 2.0


def test_the_models_learn_seconds_per_generated_token_from_the_tokens_actually_generated() -> None:
    """The router expected half of max_tokens every time; answers used anywhere from 4% to all of
    it.  Fitted on the tokens generated, the output coefficient is the tier's time per token,
    the median is taken at the expected output and the high quantile at max_tokens."""
    rng = random.Random(4)
    f = router.Features(40, 256, 1, TEXT, True)
    x = router.design(f, TierState("t", Health.READY), 1.0, share=0.5)
    observations = []
    for _ in range(120):
        tokens = rng.randint(10, 256)
        total = (0.1 + 0.04 * tokens) * rng.uniform(0.95, 1.05)
        observations.append(router._learning.predictor.Observation(list(x), 0.1, total, None, None, tokens))
    fitted = router.fit_tier(msgspec.to_builtins(observations), {})
    per_token = dict(zip(router.FEATURE_NAMES, fitted["total"][0], strict=True))["out_k"] / 1000
    assert per_token == pytest.approx(0.04, rel=0.1)
    p = TierPredictor(router.PredictorConfig())
    p.adopt(msgspec.convert(fitted, router._learning.predictor.Coefficients))
    _, _, median, high = p.predict(x, ceiling=2.0)
    assert median == pytest.approx(0.1 + 0.04 * 128, rel=0.15)
    assert high >= 0.95 * (0.1 + 0.04 * 256)
    # what the median moves per token more or fewer than expected (in X-Tiergate-Predicted)
    assert p.per_token(x) == pytest.approx(0.04, rel=0.1)
    p.correction["total"] = math.log(2.0)  # a tier running at half speed: twice the time per token
    assert p.per_token(x) == pytest.approx(0.08, rel=0.1)
    # without the tokens, the fit could only learn the average over all lengths at one x
    blind = router.fit_tier([[o.x, o.ttft, o.total] for o in observations], {})
    assert dict(zip(router.FEATURE_NAMES, blind["total"][0], strict=True))["out_k"] / 1000 != pytest.approx(
        0.04, rel=0.1
    )


def test_the_router_records_the_routed_prediction_and_the_tokens_generated() -> None:
    r = router.Learner({})
    views = [
        router.TierView(
            "edge", router._decision.Capabilities(TEXT, 4096, "m"), TierState("edge", Health.READY)
        )
    ]
    d = route(r, "tiergate-auto", views, router.Features(10, 100, 1, TEXT, True), router.DEFAULT_POLICY)
    assert d.snapshot is not None
    r.observe(d, "edge", 0.2, 1.5, 37)
    (o,) = r.predictor("edge").window
    made = d.snapshot.predictions["edge"]
    assert (o.predicted_ttft, o.predicted_total, o.tokens) == (made.ttft_p50, made.total_p50, 37)
    assert made.total_hi > made.total_p50  # the high quantile is taken at max_tokens
