"""The Messages endpoints in the app, in process, over a cloud tier that fails on demand (tests/fakes.py):
the key as ``x-api-key`` or a bearer token, errors in Anthropic's shape on its paths only (and OpenAI's
on the others), a tenant over its limit, a tier cut off mid-stream ending the stream with an ``error``
event."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import load_settings
from tests.fakes import FakeVLLM
from tests.integration.test_tenants_api import fresh_minute

BODY = {"model": "cloud", "max_tokens": 16, "messages": [{"role": "user", "content": "Hi"}]}
LIMIT = 4  # requests per minute of every tenant here (each test has an app of its own)


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM("ok") as server:
        yield server


@pytest.fixture
def app(tmp_path: Path, fake: FakeVLLM) -> Iterator[tuple[TestClient, str]]:  # type: ignore[type-arg]
    overrides = {
        "edge.enabled": False,
        "cloud.urls": [fake.url],
        "cloud.health_interval_s": 0.1,
        "limits.default.requests_per_min": LIMIT,
    }
    settings = load_settings(environ={}, data_dir=str(tmp_path), **overrides)
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 20
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, "the fake cloud never became ready"
            time.sleep(0.1)
        key = json.loads((tmp_path / "initial-credentials.json").read_text())["tenant_key"]
        yield client, key


def anthropic_error(response, status: int, kind: str) -> str:  # type: ignore[no-untyped-def]
    assert response.status_code == status, response.text
    body = response.json()
    assert body["type"] == "error" and set(body["error"]) == {"type", "message"}, body
    assert body["error"]["type"] == kind
    return str(body["error"]["message"])


def test_the_key_as_x_api_key_or_bearer_and_none(app) -> None:  # type: ignore[no-untyped-def]
    client, key = app
    for headers in ({"x-api-key": key}, {"Authorization": f"Bearer {key}"}):
        answer = client.post(
            "/v1/messages", json=BODY, headers={**headers, "anthropic-version": "2023-06-01"}
        )
        assert answer.status_code == 200 and answer.json()["content"][0]["text"] == "fake answer"
        assert answer.headers["x-tiergate-tier"] == "cloud"
    assert "x-api-key" in anthropic_error(client.post("/v1/messages", json=BODY), 401, "authentication_error")
    anthropic_error(
        client.post("/v1/messages", json=BODY, headers={"x-api-key": "tg_x_y"}), 401, "authentication_error"
    )
    counted = client.post("/v1/messages/count_tokens", json=BODY, headers={"x-api-key": key})
    assert "max_tokens" in anthropic_error(counted, 400, "invalid_request_error")  # no count_tokens field
    prompt = {k: v for k, v in BODY.items() if k != "max_tokens"}
    counted = client.post("/v1/messages/count_tokens", json=prompt, headers={"x-api-key": key})
    assert counted.status_code == 200 and counted.json()["input_tokens"] > 0


def test_errors_are_anthropics_on_its_paths_only(app) -> None:  # type: ignore[no-untyped-def]
    client, key = app
    headers = {"x-api-key": key}
    got = client.get("/v1/messages", headers=headers)
    anthropic_error(got, 405, "invalid_request_error")
    assert got.headers["allow"] == "POST"
    anthropic_error(client.post("/v1/messages/batches", json=BODY, headers=headers), 404, "not_found_error")
    huge = b"x" * (client.app.state.services.settings.server.max_body_bytes + 1)
    anthropic_error(client.post("/v1/messages", content=huge, headers=headers), 413, "request_too_large")
    anthropic_error(
        client.post("/v1/messages", json={**BODY, "model": "gpt-9"}, headers=headers), 404, "not_found_error"
    )
    chat = client.post("/v1/chat/completions", json={"model": "gpt-9", "messages": []}, headers=headers)
    assert chat.status_code == 400 and set(chat.json()["error"]) == {"message", "type", "param", "code"}
    assert client.post("/v1/messagesx", json=BODY, headers=headers).json()["error"]["code"] == "not_found"


def test_a_tier_cut_off_mid_stream_ends_it_with_an_error_event(app, fake: FakeVLLM) -> None:  # type: ignore[no-untyped-def]
    client, key = app
    fake.mode = "drop_mid_stream"
    answer = client.post("/v1/messages", json={**BODY, "stream": True}, headers={"x-api-key": key})
    assert answer.status_code == 200
    frames = [f.split("\n") for f in answer.text.strip().split("\n\n")]
    kinds = [f[0].removeprefix("event: ") for f in frames]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"] and kinds[-1] == "error", kinds
    error = json.loads(frames[-1][1].removeprefix("data: "))
    # the connection dropped: the tier unavailable, Anthropic's "overloaded" (chat's 503 service_unavailable)
    assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"
    assert "cloud" in error["error"]["message"]


def test_a_tenant_over_its_limit_gets_anthropics_429_with_retry_after(app) -> None:  # type: ignore[no-untyped-def]
    client, key = app
    fresh_minute()
    for _ in range(LIMIT):
        assert client.post("/v1/messages", json=BODY, headers={"x-api-key": key}).status_code == 200
    refused = client.post("/v1/messages", json=BODY, headers={"x-api-key": key})
    assert "requests" in anthropic_error(refused, 429, "rate_limit_error")
    assert int(refused.headers["retry-after"]) >= 1
