"""What the trace replay scores: like with like (predicted total vs the client's total, predicted
TTFT vs a stream's first byte), usage from answers and streams, the cloud-only share of cost."""

from __future__ import annotations

import json

import pytest

from bench.route_replay import (
    _usage,
    cloud_cost_by_kind,
    generate,
    hindsight_mape,
    prediction_errors,
    summarise,
    with_difficulty,
)


def _result(**kw: object) -> dict[str, object]:
    base = {
        "id": "r",
        "kind": "short",
        "stream": False,
        "images": 0,
        "status": 200,
        "tier": "edge",
        "reason": "",
        "predicted": "",
        "error": "",
        "seconds": 1.0,
        "ttfb": 1.0,
        "usage": None,
    }
    base.update(kw)
    return base


def test_streams_are_scored_on_ttft_and_total_non_streams_on_total() -> None:
    ok = [
        _result(stream=False, seconds=2.0, ttfb=2.0, predicted="ttft=100ms, total=1500ms"),
        _result(stream=True, seconds=8.0, ttfb=0.2, predicted="ttft=300ms, total=8000ms", tier="cloud"),
    ]
    errors = prediction_errors(ok)
    assert errors["all"]["total_mape"] == pytest.approx((0.25 + 0.0) / 2)
    assert errors["all"]["total_n"] == 2
    # only the stream has a time to first token of its own (a non-stream's first byte is its end)
    assert errors["all"]["ttft_mape"] == pytest.approx(0.5) and errors["all"]["ttft_n"] == 1
    assert errors["edge"]["ttft_n"] == 0 and errors["cloud"]["total_mape"] == pytest.approx(0.0)


def test_the_total_at_the_actual_length_separates_the_latency_model_from_the_length_guess() -> None:
    header = "ttft=100ms, total=1100ms, tokens=50, per_token=20.0ms"
    ok = [
        # 10 tokens where 50 were expected, in 0.3 s: the length guess was off, the latency model was
        # right (1.1 s - 40 tokens x 20 ms = 0.3 s)
        _result(seconds=0.3, predicted=header, usage={"prompt": 9, "completion": 10}),
        # 50 tokens as expected, in 1.0 s: 10% off either way
        _result(seconds=1.0, predicted=header, usage={"prompt": 9, "completion": 50}),
        _result(seconds=1.0, predicted="ttft=100ms, total=1100ms"),  # an older header: total only
    ]
    errors = prediction_errors(ok)["all"]
    assert errors["total_mape"] == pytest.approx((0.8 / 0.3 + 0.1 + 0.1) / 3)
    assert errors["length_n"] == 2
    assert errors["length_mape"] == pytest.approx(0.05)
    assert errors["length_mdape"] == pytest.approx(0.05)
    assert errors["total_mdape"] == pytest.approx(0.1)


def test_slo_attainment_counts_the_clients_total_time_and_leaves_unservable_out() -> None:
    results = [
        _result(seconds=3.0),
        _result(seconds=16.0),
        _result(status=400, error='{"error":{"code":"request_does_not_fit"}}'),
        _result(status=429),
    ]
    report = {"total": {"cost_usd": 1.0, "counterfactual_usd": 2.0}}
    row = summarise("learned", results, report, slo_ms=15000)
    assert row["unservable"] == 1 and row["slo_attainment"] == pytest.approx(1 / 3)


def test_usage_is_read_from_an_answer_and_from_a_streams_last_chunk() -> None:
    answer = json.dumps({"usage": {"prompt_tokens": 12, "completion_tokens": 30}}).encode()
    assert _usage(answer) == {"prompt": 12, "completion": 30}
    stream = (
        b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\ndata: [DONE]\n\n'
    )
    assert _usage(stream) == {"prompt": 7, "completion": 3}
    assert _usage(b"not json") is None


def test_cloud_cost_by_kind_charges_tokens_and_images() -> None:
    results = [
        _result(kind="image", images=1, usage={"prompt": 1000, "completion": 0}),
        _result(kind="short", usage={"prompt": 0, "completion": 1000}),
        _result(kind="short", status=500, usage=None),
    ]
    costs = cloud_cost_by_kind(results)
    assert costs["image"] == pytest.approx(0.0005 + 0.001) and costs["short"] == pytest.approx(0.0015)


def test_the_trace_mixes_every_kind_with_real_media() -> None:
    trace = generate(60, 0.5, seed=1)
    kinds = {e["kind"] for e in trace}
    assert kinds == {"short", "long", "hard", "image", "video"}
    video = next(e for e in trace if e["kind"] == "video")
    url = video["messages"][0]["content"][1]["video_url"]["url"]
    assert url.startswith("data:video/mp4;base64,") and len(url) > 1000  # a real clip, not a stub
    assert trace == generate(60, 0.5, seed=1)


def test_answers_from_a_tier_below_the_requests_difficulty_are_counted() -> None:
    trace = with_difficulty(generate(60, 0.5, seed=1))
    hard = [e["difficulty"] for e in trace if e["kind"] == "hard"]
    short = [e["difficulty"] for e in trace if e["kind"] == "short"]
    assert min(hard) > 0.7 and max(short) < 0.4  # the hard questions are above the edge's 0.4
    results = [
        _result(tier="edge", difficulty=0.9),  # a hard question answered by the edge
        _result(tier="cloud", difficulty=0.9),
        _result(tier="edge", difficulty=0.1),
        _result(tier="edge", difficulty=0.9, status=500),  # not answered: not counted
    ]
    report = {"total": {"cost_usd": 1.0, "counterfactual_usd": 2.0}}
    row = summarise("rule", results, report, 15000, {"edge": 0.4, "cloud": 0.7})
    assert row["below_quality"] == 1


def test_the_hindsight_floor_is_the_best_constant_per_kind_and_tier() -> None:
    ok = [
        _result(kind="video", tier="cloud", seconds=0.2),  # the answer that stopped after one token
        _result(kind="video", tier="cloud", seconds=2.0),
        _result(kind="video", tier="cloud", seconds=2.2),
        _result(kind="short", tier="edge", seconds=0.5),
    ]
    # video: 0.2 s costs 0 + 0.9 + 0.91 = 1.81 in relative errors; 2.0 s costs 9 + 0 + 0.09 (one
    # short answer predicted long is a 900% error), so the best constant is the shortest
    assert hindsight_mape(ok) == pytest.approx((0 + 0.9 + 2.0 / 2.2 + 0) / 4)
    assert hindsight_mape([]) is None
