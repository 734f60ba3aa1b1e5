"""Every way a request ends, through a real ``tiergate serve``: the real edge (llama.cpp) and a cloud
tier that fails on demand (tests/fakes.py: it is cut mid-stream, or streams slower than the deadline).

For each ending, the ledger row's status says which it was and its tokens say what the tier made;
the cost report and the tenant's tokens-per-minute counter follow from them:

    a stream the client closes after N chunks      499, >= N completion tokens, priced
    a JSON request whose client goes away          499, the tokens made before it left
    the tier cut off mid-stream                    502, the pieces it had sent
    the tier past its deadline mid-stream          504, the pieces it had sent
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Gateway, start_gateway
from tests.fakes import FakeVLLM
from tests.integration.test_tenants_api import admin, fresh_minute, ledger_rows

LONG = [{"role": "user", "content": "Count from one to one thousand in words, one number per line."}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM(mode="ok", delay_s=0.5, stream_chunks=100) as cloud:
        yield cloud


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, fake: FakeVLLM) -> Iterator[Gateway]:
    config = (
        f'[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\n'
        "[cloud.timeouts]\ntotal_s = 2.0\n"
        "[auth]\nkey_cache_s = 0.2\n[ledger]\nflush_interval_s = 0.1\n"
    )
    gw = start_gateway(tmp_path_factory.mktemp("endings"), config)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    yield gw
    gw.stop()


def tenant(gw: Gateway, **limits: int) -> tuple[str, str]:
    """A new tenant (with ``limits``): its key and its name."""
    name = f"t{uuid.uuid4().hex[:8]}"
    assert admin(gw, "POST", "/tenants", json={"name": name, "limits": limits}).status_code in (200, 201)
    return str(admin(gw, "POST", f"/tenants/{name}/keys").json()["key"]), name


def body(model: str, **kw: Any) -> dict[str, Any]:
    # ignore_eos: the small edge model may end early; the test needs an answer longer than it reads.
    return {"model": model, "messages": LONG, "max_tokens": 400, "temperature": 0.8, "ignore_eos": True, **kw}


def read_stream(gw: Gateway, key: str, rid: str, model: str, chunks: int | None) -> list[str]:
    """Streams an answer, reading ``chunks`` chunks with text (None: all), then closes the
    connection; the text chunks and the error events read."""
    headers = {"Authorization": f"Bearer {key}", "X-Request-ID": rid}
    seen: list[str] = []
    with httpx.stream(
        "POST", f"{gw.url}/v1/chat/completions", json=body(model, stream=True), headers=headers, timeout=60
    ) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk or any(c["delta"].get("content") for c in chunk.get("choices", ())):
                seen.append(line)
            if chunks is not None and len(seen) >= chunks:
                break
    return seen


def test_a_stream_closed_by_its_client_is_billed_for_what_was_made(gw: Gateway) -> None:
    key, name = tenant(gw)
    rids = [f"closed-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    for rid in rids:
        read_stream(gw, key, rid, "edge", 40)
    rows = ledger_rows(gw, want=set(rids))
    for rid in rids:
        row = rows[rid]
        assert (row.status, row.tier) == (499, "edge"), row
        assert 40 <= row.completion_tokens < 400, row  # what was made, no more than asked
        assert row.prompt_tokens > 0 and row.cost_nusd > 0 and row.error == "client gone"
    report = admin(gw, "GET", f"/reports/costs?tenant={name}").json()["total"]
    assert report["requests"] == 3 and report["answered"] == 0
    assert report["completion_tokens"] >= 120 and report["cost_nusd"] > 0


def test_a_messages_stream_closed_by_its_client_is_billed_for_what_was_made(gw: Gateway) -> None:
    """Anthropic's Messages API streams through the same ending: closed after N text deltas, 499 and
    at least N tokens."""
    key, name = tenant(gw)
    rid = f"closed-messages-{uuid.uuid4().hex[:6]}"
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01", "X-Request-ID": rid}
    # A prompt the small edge model answers at length (the Messages API has no ignore_eos); temperature 0:
    # the same answer every time.
    story = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]
    request = {"model": "edge", "messages": story, "max_tokens": 400, "temperature": 0, "stream": True}
    deltas = 0
    with httpx.stream("POST", f"{gw.url}/v1/messages", json=request, headers=headers, timeout=60) as resp:
        assert resp.status_code == 200, resp.read()
        for line in resp.iter_lines():
            if line.startswith("data: ") and json.loads(line[6:])["type"] == "content_block_delta":
                deltas += 1
                if deltas >= 30:
                    break
    row = ledger_rows(gw, want={rid})[rid]
    assert (row.status, row.tier, row.endpoint, row.error) == (499, "edge", "messages", "client gone"), row
    assert 30 <= row.completion_tokens < 400 and row.cost_nusd > 0, row
    assert admin(gw, "GET", f"/reports/costs?tenant={name}").json()["total"]["completion_tokens"] >= 30


def test_tokens_of_a_closed_stream_count_against_the_tenants_limit(gw: Gateway) -> None:
    key, _ = tenant(gw, tokens_per_min=150)
    fresh_minute()
    read_stream(gw, key, f"limit-{uuid.uuid4().hex[:6]}", "edge", 150)
    time.sleep(0.3)  # the ending charges the tokens as the connection closes
    refused = httpx.post(
        f"{gw.url}/v1/chat/completions",
        json=body("edge", max_tokens=4),
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert refused.status_code == 429, refused.text
    assert "tokens" in refused.json()["error"]["message"]


def test_a_json_request_whose_client_leaves_ends_there_billed_for_what_was_made(gw: Gateway) -> None:
    key, _ = tenant(gw)
    rid = f"json-gone-{uuid.uuid4().hex[:6]}"
    headers = {"Authorization": f"Bearer {key}", "X-Request-ID": rid}
    with pytest.raises(httpx.ReadTimeout):
        # 1,500 tokens take the small edge model well over the client's 1.5 s on any machine here.
        httpx.post(
            f"{gw.url}/v1/chat/completions", json=body("edge", max_tokens=1500), headers=headers, timeout=1.5
        )
    row = ledger_rows(gw, want={rid})[rid]
    assert (row.status, row.tier, row.error) == (499, "edge", "client gone"), row
    assert 0 < row.completion_tokens < 1500 and row.cost_nusd > 0, row  # stopped when the client left


def test_a_tier_cut_off_mid_stream_is_a_502_row_with_the_pieces_it_sent(gw: Gateway, fake: FakeVLLM) -> None:
    key, _ = tenant(gw)
    rid = f"cut-{uuid.uuid4().hex[:6]}"
    fake.mode = "drop_mid_stream"
    try:
        seen = read_stream(gw, key, rid, "cloud", None)
    finally:
        fake.mode = "ok"
    assert any('"error"' in line for line in seen)  # the client was told, in the stream
    row = ledger_rows(gw, want={rid})[rid]
    assert (row.status, row.tier) == (502, "cloud"), row
    assert row.completion_tokens == 2 and row.error.startswith("tier failed"), row


def test_a_tier_past_its_deadline_mid_stream_is_a_504_row(gw: Gateway, fake: FakeVLLM) -> None:
    key, _ = tenant(gw)
    rid = f"slow-{uuid.uuid4().hex[:6]}"
    fake.mode = "slow_stream"  # a piece every 0.5 s; the cloud's deadline is 2 s
    try:
        seen = read_stream(gw, key, rid, "cloud", None)
    finally:
        fake.mode = "ok"
    assert any('"error"' in line for line in seen)
    row = ledger_rows(gw, want={rid})[rid]
    assert (row.status, row.tier) == (504, "cloud"), row
    assert 2 <= row.completion_tokens <= 5 and row.error.startswith("timed out"), row
