"""What clients get when the cloud tier is down, fails before the first byte, or fails mid-stream."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import Gateway, free_port, start_gateway
from tests.fakes import FakeVLLM

HELLO = [{"role": "user", "content": "Say hello."}]


def _cloud_at(url: str) -> str:
    # The size rule, and anything asking for more than 4 tokens prefers the cloud, so short answers
    # test failover.
    return (
        f'[cloud]\nurls = ["{url}"]\nhealth_interval_s = 0.2\n[routing]\nedge_max_output_tokens = 4\n'
        '[policies.default]\nstrategy = "rule"\n'
    )


@pytest.fixture(scope="module")
def dead_cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """One gateway for the tests that only read what a down cloud looks like."""
    gw = start_gateway(tmp_path_factory.mktemp("dead-cloud"), _cloud_at(f"http://127.0.0.1:{free_port()}"))
    yield gw
    gw.stop()


def test_pinned_cloud_that_is_down_is_503_in_openai_shape(dead_cloud: Gateway) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        dead_cloud.client().chat.completions.create(model="cloud", messages=HELLO, max_tokens=4)
    assert caught.value.status_code == 503
    assert caught.value.type == "service_unavailable"
    assert "cloud is down" in caught.value.message


def test_auto_serves_from_the_edge_when_the_cloud_is_down_and_says_so(dead_cloud: Gateway) -> None:
    raw = dead_cloud.client().chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=HELLO, max_tokens=8
    )
    assert raw.headers["x-tiergate-tier"] == "edge"
    reason = raw.headers["x-tiergate-route-reason"]
    assert reason == "edge: cloud is down"
    ready = dead_cloud.readyz()
    assert ready["ready"] is True
    assert [t["health"] for t in ready["tiers"]] == ["ready", "down"]


def test_not_ready_when_no_tier_can_serve(tmp_path: Path) -> None:
    config = "[edge]\nenabled = false\n" + _cloud_at(f"http://127.0.0.1:{free_port()}")
    gw = start_gateway(tmp_path, config, edge=False)
    try:
        resp = httpx.get(f"{gw.url}/readyz")
        assert resp.status_code == 503
        assert resp.json()["ready"] is False
        assert resp.json()["tiers"][0]["health"] == "down"
    finally:
        gw.stop()


def test_failure_before_the_first_byte_fails_over_to_the_edge(tmp_path: Path) -> None:
    with FakeVLLM("error500") as fake:
        gw = start_gateway(tmp_path, _cloud_at(fake.url))
        try:
            gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
            for stream in (False, True):
                raw = gw.client().chat.completions.with_raw_response.create(
                    model="tiergate-auto", messages=HELLO, max_tokens=8, stream=stream
                )
                assert raw.headers["x-tiergate-tier"] == "edge"
                assert "failed over" in raw.headers["x-tiergate-route-reason"]
            assert len(fake.requests) == 2
            with pytest.raises(openai.APIStatusError) as caught:
                gw.client().chat.completions.create(model="cloud", messages=HELLO, max_tokens=4)
            assert caught.value.status_code == 503
            assert "engine crashed" in caught.value.message
        finally:
            gw.stop()


def test_failure_mid_stream_ends_the_stream_with_an_error_event(tmp_path: Path) -> None:
    with FakeVLLM("drop_mid_stream") as fake:
        gw = start_gateway(tmp_path, _cloud_at(fake.url))
        try:
            gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
            received = []
            with pytest.raises(openai.APIError) as caught:
                for chunk in gw.client().chat.completions.create(
                    model="cloud", messages=HELLO, max_tokens=50, stream=True
                ):
                    received.extend(c.delta.content or "" for c in chunk.choices)
            assert "".join(received) == "part one, part two"
            assert "cloud" in caught.value.message
            # the gateway is still fine
            assert httpx.get(f"{gw.url}/healthz").status_code == 200
        finally:
            gw.stop()


@pytest.mark.parametrize(("mode", "ejected"), [("reset", True), ("error500", False)])
def test_a_failing_replica_is_retried_on_another(tmp_path: Path, mode: str, ejected: bool) -> None:
    """Connection resets eject a replica; 5xx answers do not (it is alive, and the failure may be the
    request's own, e.g. its image path, which the per-modality breakers judge) but are retried."""
    with FakeVLLM(mode) as bad, FakeVLLM() as good:
        config = (
            f'[edge]\nenabled = false\n[cloud]\nurls = ["{bad.url}", "{good.url}"]\n'
            "health_interval_s = 0.2\neject_after_failures = 2\neject_s = 30\n"
        )
        gw = start_gateway(tmp_path, config, edge=False)
        try:
            gw.wait(lambda: "2/2" in gw.readyz()["tiers"][0]["detail"], 30, "both fakes")
            instances = []
            for i in range(8):
                raw = gw.client().chat.completions.with_raw_response.create(
                    model="cloud", messages=HELLO, max_tokens=4, extra_headers={"X-Session-ID": f"s{i}"}
                )
                assert raw.parse().choices[0].message.content == "fake answer"
                instances.append(raw.headers["x-tiergate-instance"])
            assert set(instances) == {"cloud-1"}  # the good one, every time
            metrics = httpx.get(f"{gw.url}/metrics").text
            assert 'tiergate_replica{replica="cloud-1",signal="healthy"} 1.0' in metrics
            assert f'tiergate_replica{{replica="cloud-0",signal="ejected"}} {float(ejected)}' in metrics
            replicas = gw.readyz()["tiers"][0]["instances"]
            assert replicas[0]["ejected"] is ejected
            assert len(bad.requests) == 2 if ejected else len(bad.requests) > 2
        finally:
            gw.stop()


def _members(gw: Gateway) -> list[tuple[str, bool]]:
    cloud = next(t for t in gw.readyz()["tiers"] if t["name"] == "cloud")
    return [(r["url"], r["draining"]) for r in cloud.get("instances", [])]


def test_replicas_can_be_added_and_drained_through_the_admin_api(tmp_path: Path) -> None:
    with FakeVLLM() as first, FakeVLLM() as second:
        gw = start_gateway(
            tmp_path, f'[edge]\nenabled = false\n[cloud]\nurls = ["{first.url}"]\n', edge=False
        )
        try:
            api = f"{gw.url}/admin/api/cloud/replicas"
            tenant = httpx.put(api, json={"urls": [first.url]}, headers=gw.auth)
            assert tenant.status_code == 403
            bad = httpx.put(api, json={"urls": ["file:///etc/passwd"]}, headers=gw.admin)
            assert bad.status_code == 400 and bad.json()["error"]["param"] == "urls"
            added = httpx.put(api, json={"urls": [first.url, second.url]}, headers=gw.admin)
            assert [r["name"] for r in added.json()] == ["cloud-0", "cloud-1"]
            gw.wait(lambda: "2/2" in gw.readyz()["tiers"][0]["detail"], 10, "the new replica")
            assert httpx.post(f"{api}/cloud-0/drain", headers=gw.admin).status_code == 200
            assert _members(gw) == [(second.url, False)]  # idle, so it left at once
            served = {
                gw.client()
                .chat.completions.with_raw_response.create(
                    model="cloud", messages=HELLO, max_tokens=4, extra_headers={"X-Session-ID": f"s{i}"}
                )
                .headers["x-tiergate-instance"]
                for i in range(4)
            }
            assert served == {"cloud-1"}
            assert httpx.post(f"{api}/cloud-9/drain", headers=gw.admin).status_code == 404
        finally:
            gw.stop()


def test_sighup_applies_a_new_pool_membership(tmp_path: Path) -> None:
    with FakeVLLM() as first, FakeVLLM() as second:
        gw = start_gateway(
            tmp_path, f'[edge]\nenabled = false\n[cloud]\nurls = ["{first.url}"]\n', edge=False
        )
        try:
            config = tmp_path / "tiergate.toml"
            config.write_text(config.read_text().replace(f'["{first.url}"]', f'["{second.url}"]'))
            gw.process.send_signal(signal.SIGHUP)
            gw.wait(lambda: _members(gw) == [(second.url, False)], 10, "the new membership")
            assert gw.process.poll() is None  # SIGHUP did not stop it
        finally:
            gw.stop()
