"""A cloud pool whose vision path fails (a fake vLLM that errors only on image requests):
the image breaker opens after the threshold, image requests are served text-only and marked,
text requests are unaffected, and the breaker closes once the path heals."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Gateway, start_gateway
from tests.fakes import FakeVLLM

PIXEL = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
IMAGE_MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in the picture?"},
            {"type": "image_url", "image_url": {"url": PIXEL}},
        ],
    }
]
TEXT_MESSAGES = [{"role": "user", "content": "Say hello."}]
THRESHOLD = 3
COOLDOWN_S = 6.0


def vision_cloud(url: str, extra: str = "") -> str:
    return (
        f'[cloud]\nurls = ["{url}"]\nhealth_interval_s = 0.2\nmodalities = ["text", "image"]\n'
        f"[breakers]\nconsecutive_failures = {THRESHOLD}\ncooldown_s = {COOLDOWN_S}\n{extra}"
    )


def breakers(gw: Gateway) -> dict[tuple[str, str], str]:
    return {(b["tier"], b["modality"]): b["state"] for b in gw.readyz()["breakers"]}


def image_request(gw: Gateway, **kw: Any) -> Any:
    # Pinned to the cloud: degraded requests are answered there (text-only) in milliseconds, well within
    # the cool-down, rather than by the slow edge model on a busy machine.
    return gw.client().chat.completions.with_raw_response.create(
        model="cloud", messages=IMAGE_MESSAGES, max_tokens=8, **kw
    )


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM("fail_images") as server:
        yield server


@pytest.fixture
def gateway_with_vision_cloud(tmp_path: Path, fake: FakeVLLM) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path, vision_cloud(fake.url))
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    yield gw
    gw.stop()


def test_broken_vision_path_degrades_images_spares_text_and_heals(
    gateway_with_vision_cloud: Gateway, fake: FakeVLLM
) -> None:
    gw = gateway_with_vision_cloud
    # Until the breaker opens, image requests reach the cloud and fail there (no other tier takes images).
    for _ in range(THRESHOLD):
        with pytest.raises(openai.APIStatusError, match="vision encoder crashed"):
            image_request(gw)
    assert breakers(gw)[("cloud", "image")] == "open"
    sent_to_cloud = len(fake.requests)

    raw = image_request(gw)
    assert raw.headers["x-tiergate-degraded"] == "image"
    assert raw.http_response.json()["tiergate"] == {"degraded": ["image"]}
    assert "image removed: breaker open" in raw.headers["x-tiergate-route-reason"]
    assert raw.parse().choices[0].message.content

    streamed = image_request(gw, stream=True)
    assert streamed.headers["x-tiergate-degraded"] == "image"
    last = [line for line in streamed.http_response.iter_lines() if line.startswith("data: {")][-1]
    assert '"tiergate":{"degraded":["image"]}' in last

    # Text requests still go to the cloud, untouched by the image breaker.
    text = gw.client().chat.completions.with_raw_response.create(
        model="cloud", messages=TEXT_MESSAGES, max_tokens=8
    )
    assert text.headers["x-tiergate-tier"] == "cloud"
    assert "x-tiergate-degraded" not in text.headers
    assert breakers(gw).get(("cloud", "text"), "closed") == "closed"
    # Whatever the degraded requests reached, no image was sent to the cloud.
    assert not any("image_url" in str(r["messages"]) for r in fake.requests[sent_to_cloud:])

    metrics = httpx.get(f"{gw.url}/metrics").text
    assert 'tiergate_degraded_requests_total{modality="image"} 2.0' in metrics
    # open (2), or half-open (1) if the cool-down has already passed on a slow machine
    assert re.search(r'tiergate_breaker_state\{modality="image",tier="cloud"\} [12]\.0', metrics)
    assert 'tiergate_breaker_transitions_total{modality="image",state="open",tier="cloud"} 1.0' in metrics

    # The path heals: after the cool-down one probe goes through and closes the breaker.
    fake.mode = "ok"
    gw.wait(lambda: breakers(gw)[("cloud", "image")] == "half_open", COOLDOWN_S + 5, "the cool-down")
    healed = image_request(gw)
    assert "x-tiergate-degraded" not in healed.headers
    assert healed.headers["x-tiergate-tier"] == "cloud"
    assert breakers(gw)[("cloud", "image")] == "closed"
    assert "image_url" in str(fake.requests[-1]["messages"])


def test_fail_instead_of_degrade_answers_503_with_a_clear_message(tmp_path: Path, fake: FakeVLLM) -> None:
    gw = start_gateway(tmp_path, vision_cloud(fake.url, "[degradation]\nfail_instead = true\n"))
    try:
        gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
        for _ in range(THRESHOLD):
            with pytest.raises(openai.APIStatusError):
                image_request(gw)
        with pytest.raises(openai.APIStatusError) as caught:
            image_request(gw)
        assert caught.value.status_code == 503
        assert caught.value.code == "modality_unavailable"
        assert "image path is failing" in caught.value.message
    finally:
        gw.stop()
