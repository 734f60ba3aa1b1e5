"""The learned router in a real gateway (the real edge model, a fake cloud): the route reason and
predictions in headers, strategies chosen per tenant policy, budgets from the ledger, learning
from observed requests, refit and persistence across a restart."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TIERGATE, Gateway, alive, children, start_gateway
from tests.fakes import FakeVLLM
from tests.integration.test_tenants_api import admin

CONFIG = """
[cloud]
urls = ["{url}"]
health_interval_s = 0.2
[ledger]
flush_interval_s = 0.1
[router]
budget_refresh_s = 0.2
save_interval_s = 0.5
exploration = 0.0
[router.predictor]
min_samples = 6
refit_every = 6
"""


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM(delay_s=0.05) as server:
        yield server


def start(tmp: Path, fake: FakeVLLM) -> Gateway:
    gw = start_gateway(tmp, CONFIG.format(url=fake.url))
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    return gw


@pytest.fixture(scope="module")
def gw(fake: FakeVLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start(tmp_path_factory.mktemp("router"), fake)
    yield gateway
    gateway.stop()


def ask(gw: Gateway, model: str = "tiergate-auto", **body: Any) -> httpx.Response:
    payload = {
        "model": model,
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 4,
        **body,
    }
    headers = {**gw.auth, "Cache-Control": "no-store"}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=payload, headers=headers, timeout=60)


def set_policy(gw: Gateway, policy: dict[str, Any]) -> None:
    resp = admin(gw, "PUT", "/tenants/default/policy", json=policy)
    assert resp.status_code == 200, resp.text


def test_an_easy_short_request_goes_to_the_edge_and_says_why(gw: Gateway) -> None:
    set_policy(gw, {"strategy": "learned", "latency": {"total_ms": 60000}})
    resp = ask(gw)
    assert resp.status_code == 200, resp.text
    assert resp.headers["x-tiergate-tier"] == "edge"
    reason = resp.headers["x-tiergate-route-reason"]
    assert reason.startswith("edge: p95 predicted ") and "< slo 60000ms" in reason and "x cloud" in reason
    assert "total=" in resp.headers["x-tiergate-predicted"]


def test_the_strategy_follows_the_tenant_policy_on_the_next_request(gw: Gateway) -> None:
    set_policy(gw, {"strategy": "always-cloud"})
    resp = ask(gw)
    assert resp.headers["x-tiergate-tier"] == "cloud"
    assert resp.headers["x-tiergate-route-reason"] == "cloud: always-cloud strategy"
    set_policy(gw, {"strategy": "always-edge"})
    assert ask(gw).headers["x-tiergate-tier"] == "edge"
    set_policy(gw, {"strategy": "always:cloud"})  # the current name of always-cloud
    assert ask(gw).headers["x-tiergate-route-reason"] == "cloud: always-cloud strategy"
    set_policy(gw, {"strategy": "rule"})
    assert ask(gw, max_tokens=1000).headers["x-tiergate-route-reason"] == "cloud: max_tokens 1000 > 256"
    set_policy(gw, {"strategy": "round-robin"})
    assert {ask(gw).headers["x-tiergate-tier"] for _ in range(2)} == {"edge", "cloud"}


def test_a_hard_request_goes_to_the_stronger_model(gw: Gateway) -> None:
    set_policy(gw, {"strategy": "learned"})
    hard = "Prove that there are infinitely many primes of the form 4k+3 and derive the bound step by step."
    resp = ask(gw, messages=[{"role": "user", "content": hard}], max_tokens=16)
    assert resp.headers["x-tiergate-tier"] == "cloud", resp.headers["x-tiergate-route-reason"]
    assert "difficulty" in resp.headers["x-tiergate-route-reason"]


def test_a_spent_budget_refuses_or_routes_to_the_cheapest(gw: Gateway) -> None:
    assert ask(gw, model="cloud").status_code == 200  # something on this month's ledger
    set_policy(gw, {"budget": {"amount_usd": 1e-9, "period": "month", "on_exhausted": "refuse"}})
    deadline = time.monotonic() + 10
    while (resp := ask(gw)).status_code == 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert resp.status_code == 429 and "budget" in resp.json()["error"]["message"]
    assert resp.json()["error"]["code"] == "insufficient_quota" and resp.headers["x-should-retry"] == "false"
    assert int(resp.headers["retry-after"]) > 0
    set_policy(gw, {"strategy": "learned", "budget": {"amount_usd": 1e-9, "on_exhausted": "cheapest"}})
    resp = ask(gw, max_tokens=64)
    assert resp.status_code == 200 and resp.headers["x-tiergate-tier"] == "edge"
    assert "budget spent" in resp.headers["x-tiergate-route-reason"]
    set_policy(gw, {})


def test_it_learns_refits_and_keeps_what_it_learned_across_a_restart(fake: FakeVLLM, tmp_path: Path) -> None:
    gw = start(tmp_path, fake)
    try:
        for i in range(8):
            assert ask(gw, model="cloud", stream=bool(i % 2)).status_code == 200
        state = admin(gw, "GET", "/router").json()
        assert state["tiers"]["cloud"]["samples"] == 8
        assert state["prompt_tokens"]["cloud"]["samples"] == 8  # the prompt tokens each answer counted
        refit = admin(gw, "POST", "/router/refit")
        assert refit.status_code == 200, refit.text
        cloud = refit.json()["tiers"]["cloud"]
        assert cloud["fitted"] and cloud["live_mape"]["total"] is not None
        version = refit.json()["version"]
        assert admin(gw, "GET", "/router", key=gw.api_key).status_code == 403
        workers = children(gw.process.pid)  # the refit worker process among them
        assert workers
    finally:
        gw.stop()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers), "a refit worker outlived the gateway"
    saved = json.loads((tmp_path / "data" / "router" / "predictor.json").read_text())
    assert saved["version"] == version and len(saved["tiers"]["cloud"]["window"]) == 8
    assert saved["prompt_tokens"]["cloud"]["samples"] == 8
    again = start_gateway(tmp_path, (tmp_path / "tiergate.toml").read_text().split("\n", 1)[1])
    try:
        again.wait(lambda: again.tier_health("cloud") == "ready", 30, "the fake cloud")
        state = admin(again, "GET", "/router").json()
        assert state["version"] == version and state["tiers"]["cloud"]["fitted"]
        assert state["prompt_tokens"]["cloud"]["samples"] == 8
    finally:
        again.stop()


def test_calibrate_probes_each_tier_and_fits(gw: Gateway, tmp_path: Path) -> None:
    config = gw.data_dir.parent / "tiergate.toml"
    done = subprocess.run(
        [
            TIERGATE,
            "calibrate",
            "--config",
            str(config),
            "--url",
            gw.url,
            "--tier",
            "cloud",
            "--requests",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "sent 8 probes, 8 answered" in done.stdout and "cloud: " in done.stdout
    state = admin(gw, "GET", "/router").json()["tiers"]["cloud"]
    assert state["fitted"] and state["samples"] >= 8
    assert (gw.data_dir / "router" / "predictor.json").exists()


def test_train_difficulty_from_a_file_reaches_the_running_gateway(gw: Gateway, tmp_path: Path) -> None:
    examples = tmp_path / "labelled.jsonl"
    lines = [json.dumps({"prompt": f"say hi to friend {i}", "label": "easy"}) for i in range(30)]
    lines += [json.dumps({"prompt": f"say hi using category theory {i}", "label": "hard"}) for i in range(30)]
    examples.write_text("\n".join(lines) + "\n")
    config = gw.data_dir.parent / "tiergate.toml"
    done = subprocess.run(
        [TIERGATE, "router", "train-difficulty", str(examples), "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "trained on 60 examples" in done.stdout
    assert (gw.data_dir / "router" / "difficulty.json").exists()
    deadline = time.monotonic() + 30
    while admin(gw, "GET", "/router").json()["difficulty"]["source"] != str(examples):
        assert time.monotonic() < deadline, "the gateway did not load the new difficulty model"
        time.sleep(0.5)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x", "label": "perhaps"}\n')
    done = subprocess.run(
        [TIERGATE, "router", "train-difficulty", str(bad), "--config", str(config)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and "line 1" in done.stderr


def test_the_refit_worker_exits_when_the_gateway_is_killed(fake: FakeVLLM, tmp_path: Path) -> None:
    gw = start(tmp_path, fake)
    try:
        for _ in range(6):
            assert ask(gw, model="cloud").status_code == 200
        assert admin(gw, "POST", "/router/refit").status_code == 200
        workers = children(gw.process.pid)
        assert workers
    finally:
        gw.process.kill()
        gw.process.wait(30)
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in workers), "the refit worker outlived a killed gateway"
