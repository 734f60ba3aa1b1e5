"""Tiers by name, end to end: one gateway serving three real tiers — the llama.cpp edge (``edge``), an
ONNX Runtime edge configured as ``[tiers.onnx]``, and the vLLM cloud (``cloud``, the session's local vLLM
server) — and ``tiergate-auto`` choosing among them by the tenant's policy."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Gateway, start_gateway

pytestmark = pytest.mark.cloud

CACHE = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
EXPORT = CACHE / "models" / "smollm2-135m-onnx"
HELLO = [{"role": "user", "content": "Say hello."}]
ONNX_MODEL = "onnx-smollm2-135m"


def _config(vllm_url: str) -> str:
    return f"""
[tiers.onnx]
kind = "edge"
backend = "onnx"
model_name = "{ONNX_MODEL}"
quality = 0.3
max_queue = 8

[cloud]
urls = ["{vllm_url}"]

[cloud.local]
enabled = false

[[pricing.prices]]
tier = "edge"
prompt_per_1k = 0.00002
completion_per_1k = 0.00004

[[pricing.prices]]
tier = "onnx"
prompt_per_1k = 0.00001
completion_per_1k = 0.00002

[[pricing.prices]]
tier = "cloud"
prompt_per_1k = 0.0005
completion_per_1k = 0.0015
"""


@pytest.fixture(scope="module")
def three(cloud_gateway: Gateway, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    if not (EXPORT / "tiergate-build.json").exists():
        pytest.skip(f"no ONNX export at {EXPORT} (scripts/setup.sh makes it)")
    cloud = next(t for t in cloud_gateway.readyz()["tiers"] if t["name"] == "cloud")
    vllm_url = cloud["instances"][0]["url"]
    gw = start_gateway(tmp_path_factory.mktemp("three-tiers"), _config(vllm_url))
    gw.wait(lambda: all(t["health"] == "ready" for t in gw.readyz()["tiers"]), 180, "all three tiers")
    yield gw
    gw.stop()


def _policy(gw: Gateway, body: dict[str, Any]) -> None:
    """The default tenant's policy, with the result cache off (the same question is asked of each tier)."""
    body = {"cache": False, **body}
    put = httpx.put(f"{gw.url}/admin/api/tenants/default/policy", json=body, headers=gw.admin, timeout=30)
    assert put.status_code == 200, put.text


def _ask(gw: Gateway, model: str = "tiergate-auto") -> tuple[str, str, str]:
    """(tier, route reason, model that answered) of one short chat."""
    raw = gw.client().chat.completions.with_raw_response.create(
        model=model, messages=HELLO, max_tokens=8, temperature=0
    )
    answer = raw.parse()
    assert answer.choices[0].message.content is not None
    return raw.headers["x-tiergate-tier"], raw.headers["x-tiergate-route-reason"], answer.model


def test_every_named_tier_is_a_model_and_ready(three: Gateway) -> None:
    names = [m.id for m in three.client().models.list().data]
    assert names[:4] == ["tiergate-auto", "edge", "cloud", "onnx"]
    # the embedding and speech models (and the speech model's alias), once scripts/setup.sh built them
    assert set(names[4:]) <= {"all-MiniLM-L6-v2", "whisper-base", "whisper-1"}
    tiers = {t["name"]: t for t in three.readyz()["tiers"]}
    assert {n: t["health"] for n, t in tiers.items()} == {"edge": "ready", "cloud": "ready", "onnx": "ready"}
    assert "onnxruntime" in tiers["onnx"]["detail"]


def test_a_named_tier_can_be_pinned(three: Gateway) -> None:
    tier, reason, model = _ask(three, "onnx")
    assert (tier, model) == ("onnx", ONNX_MODEL)
    assert "onnx" in reason


def test_tiergate_auto_goes_where_the_policy_says(three: Gateway) -> None:
    try:
        for name, model in (("onnx", ONNX_MODEL), ("cloud", None), ("edge", "edge-smollm2-135m")):
            _policy(three, {"strategy": f"always:{name}"})
            tier, reason, answered = _ask(three)
            assert tier == name, reason
            assert model is None or answered == model
        # The preferred tier, when it meets the (absent) latency objective, under the learned strategy.
        _policy(three, {"strategy": "learned", "preferred_tier": "onnx", "weigh_difficulty": False})
        tier, reason, _ = _ask(three)
        assert tier == "onnx", reason
        # A quality floor only the cloud's declared quality (0.7) reaches.
        _policy(three, {"strategy": "learned", "quality_floor": 0.6, "weigh_difficulty": False})
        tier, reason, _ = _ask(three)
        assert tier == "cloud", reason
    finally:
        _policy(three, {})


def test_a_policy_naming_an_unknown_tier_is_refused(three: Gateway) -> None:
    put = httpx.put(
        f"{three.url}/admin/api/tenants/default/policy",
        json={"strategy": "always:nowhere"},
        headers=three.admin,
        timeout=30,
    )
    assert put.status_code == 400
    assert put.json()["error"]["param"] == "strategy"
