"""OpenTelemetry spans per stage of a request, read back from the SDK's in-memory exporter."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk")

from litestar.testing import TestClient
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.app import create_app
from gateway.ops.tracing import Tracing
from gateway.settings import load_settings
from tests.fakes import FakeVLLM


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[TestClient, InMemorySpanExporter, FakeVLLM]]:  # type: ignore[type-arg]
    exporter = InMemorySpanExporter()
    with FakeVLLM("ok") as fake:
        settings = load_settings(
            environ={},
            data_dir=str(tmp_path),
            **{
                "edge.enabled": False,
                "cloud.urls": [fake.url],
                "cloud.health_interval_s": 0.1,
                "auth.open_mode": True,
            },
        )
        app = create_app(settings, tracing=Tracing(exporter=exporter))
        with TestClient(app) as client:
            deadline = time.monotonic() + 20
            while client.get("/readyz").status_code != 200:
                assert time.monotonic() < deadline, "the fake cloud never became ready"
                time.sleep(0.1)
            exporter.clear()
            yield client, exporter, fake


def test_a_chat_request_has_one_trace_with_a_span_per_stage(traced) -> None:  # type: ignore[no-untyped-def]
    client, exporter, fake = traced
    body = {"model": "tiergate-auto", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    resp = client.post("/v1/chat/completions", json=body, headers={"X-Request-ID": "trace-me"})
    assert resp.status_code == 200
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root = spans["POST /v1/chat/completions"]
    assert root.kind is SpanKind.SERVER
    assert root.attributes["tiergate.request_id"] == "trace-me"
    assert root.attributes["http.status_code"] == 200
    assert root.attributes["tiergate.tier"] == "cloud"
    for stage in ("auth", "rate_limit", "cache.lookup", "route", "tier.cloud", "ledger.write"):
        span = spans[stage]
        assert span.context.trace_id == root.context.trace_id, stage
        assert span.parent is not None and span.parent.span_id == root.context.span_id, stage
        assert root.start_time <= span.start_time <= span.end_time <= root.end_time
    assert spans["cache.lookup"].attributes["tiergate.cache"] == "miss"
    assert fake.request_ids == ["trace-me"], "the request id goes upstream too"

    # A second request is a trace of its own; a cache hit skips routing and the tier.
    exporter.clear()
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    names = [s.name for s in exporter.get_finished_spans()]
    assert "tier.cloud" not in names and "route" not in names
    assert len({s.context.trace_id for s in exporter.get_finished_spans()}) == 1


def test_without_an_endpoint_tracing_is_off_and_costs_a_no_op() -> None:
    tracing = Tracing("")
    assert not tracing.enabled
    with tracing.span("anything") as span:
        assert span is None
