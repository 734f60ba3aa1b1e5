"""A real gateway (``tiergate serve``) in front of a fault-injecting fake vLLM: after a scripted mix of
requests (cache miss, hit, upstream errors, a degraded answer, a 429, a timeout), /metrics parses with
Prometheus' own text parser and every family holds exactly the expected counts; every log line written
for a request carries its id, and the id went upstream."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Gateway, start_gateway
from tests.fakes import FakeVLLM, ThreadedApp
from tests.integration.test_breakers import IMAGE_MESSAGES, THRESHOLD

CHAT = "/v1/chat/completions"
TEXT = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM("fail_images", delay_s=6.0) as server:
        yield server


@pytest.fixture
def gw(tmp_path: Path, fake: FakeVLLM) -> Iterator[Gateway]:
    config = (
        f'[edge]\nenabled = false\n[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\n'
        'modalities = ["text", "image"]\n[cloud.timeouts]\nfirst_byte_s = 2.0\ntotal_s = 4.0\n'
        f"[breakers]\nconsecutive_failures = {THRESHOLD}\ncooldown_s = 600\n"
        '[observability]\nrequest_log = true\ntenant_labels = ["limited"]\n'
    )
    gateway = start_gateway(tmp_path, config, edge=False)
    gateway.wait(lambda: gateway.tier_health("cloud") == "ready", 30, "the fake cloud")
    yield gateway
    gateway.stop()


def chat(gw: Gateway, rid: str, key: str | None = None, **body: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or gw.api_key}", "X-Request-ID": rid}
    payload = {"model": "tiergate-auto", "messages": TEXT, "max_tokens": 8, **body}
    return httpx.post(gw.url + CHAT, json=payload, headers=headers, timeout=30)


def scrape(gw: Gateway) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(gw.url + "/metrics", timeout=10).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(metrics: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum over the series of ``name`` that carry ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in metrics.items() if n == name and want <= ls)


def limited_tenant_key(gw: Gateway) -> str:
    admin = {"Authorization": f"Bearer {gw.admin_key}"}
    body = {"name": "limited", "limits": {"requests_per_min": 1}}
    assert httpx.post(f"{gw.url}/admin/api/tenants", json=body, headers=admin).status_code in (200, 201)
    resp = httpx.post(f"{gw.url}/admin/api/tenants/limited/keys", json={}, headers=admin)
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["key"])


def test_a_scripted_mix_shows_in_every_metric_family_and_every_log_line_has_its_request_id(
    gw: Gateway, fake: FakeVLLM
) -> None:
    statuses: dict[str, int] = {}
    # 1 miss, then 1 hit of the same deterministic request
    for rid in ("mix-miss", "mix-hit"):
        statuses[rid] = chat(gw, rid, temperature=0).status_code
    # the vision path fails THRESHOLD times (503: no tier could serve), which opens the image breaker
    for i in range(THRESHOLD):
        statuses[f"mix-err-{i}"] = chat(gw, f"mix-err-{i}", messages=IMAGE_MESSAGES).status_code
    # then an image request is served text-only
    degraded = chat(gw, "mix-degraded", messages=IMAGE_MESSAGES)
    statuses["mix-degraded"] = degraded.status_code
    assert degraded.headers["x-tiergate-degraded"] == "image"
    # a tenant with 1 request a minute: its second is a 429 (both within one clock minute)
    key = limited_tenant_key(gw)
    while time.time() % 60 > 55:
        time.sleep(1)
    for rid in ("mix-limited-ok", "mix-limited-429"):
        statuses[rid] = chat(gw, rid, key=key).status_code
    # an upstream that answers too late: a timeout
    fake.mode = "slow"
    statuses["mix-timeout"] = chat(gw, "mix-timeout", max_tokens=9).status_code
    fake.mode = "fail_images"
    assert statuses == {
        "mix-miss": 200,
        "mix-hit": 200,
        **{f"mix-err-{i}": 503 for i in range(THRESHOLD)},
        "mix-degraded": 200,
        "mix-limited-ok": 200,
        "mix-limited-429": 429,
        "mix-timeout": 503,
    }

    m = scrape(gw)
    route = {"route": CHAT, "model": "tiergate-auto"}
    assert (
        total(m, "tiergate_requests_total", **route, tenant_class="standard", tier="cloud", status="200") == 3
    )
    assert (
        total(m, "tiergate_requests_total", **route, tenant_class="limited", tier="cloud", status="200") == 1
    )
    assert (
        total(m, "tiergate_requests_total", **route, tenant_class="limited", tier="none", status="429") == 1
    )
    assert (
        total(m, "tiergate_requests_total", **route, tenant_class="standard", status="503") == THRESHOLD + 1
    )
    assert total(m, "tiergate_request_duration_seconds_count", route=CHAT) == 9
    assert total(m, "tiergate_rate_limited_total") == 1
    assert total(m, "tiergate_rate_limited_total", reason="tenant_requests") == 1
    assert total(m, "tiergate_cache_requests_total", result="miss") == 1
    assert total(m, "tiergate_cache_requests_total", result="hit") == 1
    assert total(m, "tiergate_degraded_requests_total", modality="image") == 1
    assert total(m, "tiergate_breaker_transitions_total", tier="cloud", modality="image", state="open") == 1
    assert total(m, "tiergate_breaker_state", tier="cloud", modality="image") == 2
    assert total(m, "tiergate_timeouts_total", tier="cloud") == 1
    # routed: the miss, the errors, the degraded one, the limited tenant's first, the timeout (not the
    # hit, not the 429)
    assert total(m, "tiergate_route_decisions_total", strategy="learned", tier="cloud") == THRESHOLD + 4
    # every routed request asked the cloud's admission gate for a slot, in the fast lane, at once
    assert total(m, "tiergate_queue_wait_seconds_count", tier="cloud", lane="fast") == THRESHOLD + 4
    assert total(m, "tiergate_queue_length", tier="cloud") == 0
    # answered by the cloud: miss, degraded, limited's first; 2 tokens each
    assert total(m, "tiergate_tier_latency_seconds_count", tier="cloud") == 3
    assert total(m, "tiergate_generated_tokens_total", tier="cloud") == 6
    assert total(m, "tiergate_generation_tokens_per_second_count", tier="cloud") == 3
    # a durable ledger row for each 200
    assert total(m, "tiergate_ledger_write_seconds_count") == 4
    assert total(m, "tiergate_replica", replica="cloud-0", signal="healthy") == 1
    assert total(m, "tiergate_tier_ready", tier="cloud") == 1
    assert total(m, "tiergate_cloud_desired_replicas") == 1
    for name, labels in m:
        assert not any("mix-" in v or "tg_" in v for _, v in labels), f"unbounded label value in {name}"

    # Logs: every line is JSON; each request's lines carry its id; the id went upstream.
    lines = [json.loads(line) for line in gw.log().splitlines() if line.strip()]
    by_id: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        by_id.setdefault(line.get("request_id", ""), []).append(line)
    for rid, status in statuses.items():
        mine = by_id.get(rid, [])
        assert any(line["logger"] == "tiergate.request" and line["status"] == status for line in mine), rid
    # lines written deep in the stack, on a request's behalf, have its id
    opened = [line for line in lines if "is now open" in line["message"]]
    assert [line.get("request_id") for line in opened] == [f"mix-err-{THRESHOLD - 1}"]
    retries = [line for line in lines if "retrying" in line["message"] or "failed before" in line["message"]]
    assert retries and all(str(line.get("request_id", "")).startswith("mix-") for line in retries)
    # and no line written during a request lacks an id
    request_loggers = {
        "gateway.pipeline.answers.exact",
        "gateway.errors",
        "tiers.cloud._pool",
        "gateway.services",
        "tiergate.request",
    }
    during = [line for line in lines if line["logger"] in request_loggers and line["level"] != "INFO"]
    assert all(line.get("request_id") for line in during), during
    sent = [r for r in fake.request_ids if r and r.startswith("mix-")]
    assert {"mix-miss", "mix-err-0", "mix-degraded", "mix-timeout"} <= set(sent)
    assert "mix-hit" not in sent


def test_the_edge_models_speed_is_measured(edge_only: Gateway) -> None:
    resp = chat(edge_only, "edge-speed", model="edge", max_tokens=8, stream=True)
    assert resp.status_code == 200
    resp = chat(edge_only, "edge-speed-2", model="edge", max_tokens=8)
    assert resp.status_code == 200
    produced = resp.json()["usage"]["completion_tokens"]
    m = scrape(edge_only)
    assert total(m, "tiergate_generation_tokens_per_second_count", tier="edge") == 2
    assert total(m, "tiergate_generation_tokens_per_second_sum", tier="edge") > 0
    assert total(m, "tiergate_generated_tokens_total", tier="edge") >= produced > 0
    assert total(m, "tiergate_time_to_first_token_seconds_count", tier="edge") == 1
    assert (
        total(m, "tiergate_route_decisions_total", strategy="pinned", tier="edge", reason_class="pinned") == 2
    )
    assert total(m, "tiergate_tier_ready", tier="edge") == 1


def test_traces_reach_an_otlp_collector(tmp_path: Path) -> None:
    """A real ``tiergate serve`` with ``otlp_endpoint`` set exports its spans over OTLP/HTTP to a
    collector stand-in, which decodes them with OpenTelemetry's own protobuf types."""
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from aiohttp import web
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[ExportTraceServiceRequest] = []

    class Collector(ThreadedApp):
        def routes(self, app: web.Application) -> None:
            app.router.add_post("/v1/traces", self.traces)

        async def traces(self, request: web.Request) -> web.Response:
            message = ExportTraceServiceRequest()
            message.ParseFromString(await request.read())
            received.append(message)
            return web.Response(body=b"", content_type="application/x-protobuf")

    with Collector() as collector, FakeVLLM("ok") as fake:
        config = (
            f'[edge]\nenabled = false\n[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\n'
            f'[observability]\notlp_endpoint = "{collector.url}/v1/traces"\n'
        )
        gw = start_gateway(tmp_path, config, edge=False)
        try:
            gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
            assert chat(gw, "otlp-1").status_code == 200
        finally:
            gw.stop()  # a graceful stop flushes the batch of spans
    spans = [
        span
        for message in received
        for resource in message.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    services = {
        a.value.string_value
        for m in received
        for r in m.resource_spans
        for a in r.resource.attributes
        if a.key == "service.name"
    }
    assert services == {"tiergate"}
    mine = [s for s in spans if any(a.value.string_value == "otlp-1" for a in s.attributes)]
    assert len(mine) == 1, "one server span for the request"
    trace = [s for s in spans if s.trace_id == mine[0].trace_id]
    assert {s.name for s in trace} >= {
        "POST /v1/chat/completions",
        "auth",
        "rate_limit",
        "route",
        "tier.cloud",
        "ledger.write",
    }
