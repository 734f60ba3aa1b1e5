"""What the gateway answers, checked against OpenAI's own OpenAPI document (tests/openai_schema.py):
JSON answers, every stream chunk (with and without ``stream_options.include_usage``), the model
list and error bodies. The edge is the in-process app with its real llama.cpp model; the cloud
variant asks the suite's shared gateway and its local vLLM server."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from litestar.testing import TestClient

from tests.conftest import Gateway, local_vllm_installed
from tests.openai_schema import CHAT_COMPLETION, CHAT_COMPLETION_CHUNK, ERROR, MODEL, MODELS, validate

# Every answer from the tier itself, not a cache replay.
FRESH = {"Cache-Control": "no-cache"}
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The gateway as an in-process app (no cloud), with the real llama.cpp edge."""
    from gateway.app import create_app
    from gateway.settings import load_settings

    data = tmp_path_factory.mktemp("schema")
    # The test client is no loopback address ("testclient"): /readyz shows the tiers it waits for
    # only with public details on.
    overrides: dict[str, Any] = {
        "cloud.enabled": False,
        "auth.open_mode": True,
        "observability.public_details": True,
    }
    settings = load_settings(environ={}, data_dir=str(data), **overrides)
    with TestClient(create_app(settings), timeout=120) as client:
        _wait_ready(client, "edge")
        yield client


def _wait_ready(client: httpx.Client, tier: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tiers = client.get("/readyz").json().get("tiers", [])
        if any(t["name"] == tier and t["health"] == "ready" for t in tiers):
            return
        time.sleep(0.2)
    raise AssertionError(f"the {tier} tier was not ready after {timeout}s")


def chat(client: httpx.Client, **body: Any) -> httpx.Response:
    request = {"messages": HELLO, "max_tokens": 12, "temperature": 0, **body}
    return client.post("/v1/chat/completions", json=request, headers=FRESH)


def stream(client: httpx.Client, **body: Any) -> tuple[list[Any], bool]:
    """The decoded events of a streamed answer, and whether it ended with ``data: [DONE]``."""
    request = {"messages": HELLO, "max_tokens": 12, "temperature": 0, "stream": True, **body}
    with client.stream("POST", "/v1/chat/completions", json=request, headers=FRESH) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line for line in resp.iter_lines() if line]
    assert all(e.startswith("data: ") for e in events), events
    done = events[-1:] == ["data: [DONE]"]
    return [json.loads(e.removeprefix("data: ")) for e in events[: -1 if done else None]], done


def check_json_answer(client: httpx.Client, model: str) -> None:
    resp = chat(client, model=model)
    assert resp.status_code == 200, resp.text
    validate(CHAT_COMPLETION, resp.json())


def check_stream(client: httpx.Client, model: str, include_usage: bool | None) -> None:
    options = {} if include_usage is None else {"stream_options": {"include_usage": include_usage}}
    chunks, done = stream(client, model=model, **options)
    for i, chunk in enumerate(chunks):
        try:
            validate(CHAT_COMPLETION_CHUNK, chunk)
        except AssertionError as exc:
            raise AssertionError(f"chunk {i} of {len(chunks)}: {exc}") from None
    assert done, "the stream did not end with data: [DONE]"
    if include_usage:  # OpenAI: usage null on every chunk but one last one, which has no choices
        assert all(c.get("usage") is None for c in chunks[:-1])
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] > 0
    else:
        assert all(c.get("usage") is None for c in chunks)
        assert all(c["choices"] for c in chunks)


def test_a_json_answer_validates(app: httpx.Client) -> None:
    check_json_answer(app, "edge")


def test_a_json_answer_through_auto_validates(app: httpx.Client) -> None:
    check_json_answer(app, "tiergate-auto")


@pytest.mark.parametrize("include_usage", [None, False, True], ids=["no-options", "no-usage", "usage"])
def test_every_chunk_of_a_stream_validates(app: httpx.Client, include_usage: bool | None) -> None:
    check_stream(app, "edge", include_usage)


def test_the_model_list_validates(app: httpx.Client) -> None:
    resp = app.get("/v1/models")
    assert resp.status_code == 200
    validate(MODELS, resp.json())


@pytest.mark.parametrize("model", ["edge", "tiergate-auto"])
def test_one_model_validates(app: httpx.Client, model: str) -> None:
    resp = app.get(f"/v1/models/{model}")  # GET /v1/models/{model}: issue #20
    assert resp.status_code == 200, resp.text
    validate(MODEL, resp.json())
    assert resp.json()["id"] == model


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"model": "gpt-9"}, 404),  # unknown model
        ({"model": "edge", "messages": []}, 400),  # malformed
        ({"model": "edge", "messages": [{"role": "user", "content": "word " * 9000}]}, 400),  # too long
    ],
    ids=["unknown-model", "malformed", "over-the-context"],
)
def test_error_bodies_validate(app: httpx.Client, body: dict[str, Any], status: int) -> None:
    resp = chat(app, **body)
    assert resp.status_code == status, resp.text
    validate(ERROR, resp.json())


def test_an_unknown_path_is_an_error_body(app: httpx.Client) -> None:
    resp = app.get("/v1/nothing")
    assert resp.status_code == 404
    validate(ERROR, resp.json())


@pytest.fixture(scope="module")
def cloud(request: pytest.FixtureRequest) -> Iterator[httpx.Client]:
    """The suite's gateway once its local vLLM server answers."""
    if not local_vllm_installed():
        pytest.skip("the local vLLM server is not installed (scripts/setup.sh installs it)")
    gw: Gateway = request.getfixturevalue("cloud_gateway")
    with httpx.Client(base_url=gw.url, headers=gw.auth, timeout=120) as client:
        yield client


@pytest.mark.cloud
def test_a_cloud_json_answer_validates(cloud: httpx.Client) -> None:
    check_json_answer(cloud, "cloud")


@pytest.mark.cloud
@pytest.mark.parametrize("include_usage", [None, True], ids=["no-options", "usage"])
def test_every_chunk_of_a_cloud_stream_validates(cloud: httpx.Client, include_usage: bool | None) -> None:
    check_stream(cloud, "cloud", include_usage)
