"""Hostile input to the Responses API: items of unknown types, 10,000 items, fields no tier can honour, a
``previous_response_id`` chain 1,000 turns deep, huge stored conversations and a tenant's store filled up.
Each is a clear 4xx or bounded, and nothing stored is lost.

A gateway of its own in front of a fake cloud (tests/fakes.py) that takes any context, with small
``[responses]`` bounds so that they are reached in a few requests (a chain of 1,000 turns and its
one-query read are shown on the store itself: tests/gateway/accounts/test_responses_store.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import start_cloud_gateway

MAX_TURNS = 40
MAX_CONVERSATION = 768 << 10
MAX_PER_TENANT = 2 << 20
BIG = "x" * (300 << 10)  # a 300 KiB input (the fake cloud takes bodies up to 1 MiB)


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM() as fake:
        tables = (
            f"[server]\nmax_body_bytes = {2 << 20}\n[responses]\nmax_turns = {MAX_TURNS}\n"
            f"max_conversation_bytes = {MAX_CONVERSATION}\nmax_bytes_per_tenant = {MAX_PER_TENANT}\n"
        )
        gw = start_cloud_gateway(
            tmp_path_factory.mktemp("responses"), fake.url, "max_context_tokens = 10000000\n", tables
        )
        yield gw
        gw.stop()


HTTP = httpx.Client(timeout=60)  # one client: a new one per request costs tens of milliseconds


def post(gw: Gateway, key: str | None = None, **body: Any) -> httpx.Response:
    payload = {"model": "cloud", "max_output_tokens": 4, **body}
    auth = {"Authorization": f"Bearer {key or gw.api_key}"}
    return HTTP.post(f"{gw.url}/v1/responses", json=payload, headers=auth)


def refused(resp: httpx.Response, status: int, param: str | None = None) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    error: dict[str, Any] = resp.json()["error"]
    if param is not None:
        assert error["param"] == param, error
    return error


def tenant_key(gw: Gateway, name: str) -> str:
    admin = {"Authorization": f"Bearer {gw.admin_key}"}
    httpx.post(f"{gw.url}/admin/api/tenants", json={"name": name}, headers=admin)
    resp = httpx.post(f"{gw.url}/admin/api/tenants/{name}/keys", json={}, headers=admin)
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["key"])


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (
            {"input": [{"role": "user", "content": "hi"}, {"type": "reasoning", "summary": []}]},
            "input[1].type",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": [{"role": "user", "content": "hi", "bogus": 1}]}, "input[0].bogus"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"type": "function_call_output", "output": "sunny"}]}, "input[0].call_id"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "hi", "truncation": "auto"}, "truncation"),
        ({"input": "hi", "prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"input": "hi", "conversation": "conv_1"}, "conversation"),
        ({"input": "hi", "reasoning": {"mode": "deep"}}, "reasoning.mode"),
        ({"input": "hi", "background": True}, "background"),
        ({"input": "hi", "text": {"verbosity": "low"}}, "text.verbosity"),
        ({"input": "hi", "frobnicate": True}, "frobnicate"),
        ({"input": []}, "input"),
        ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
            "input[0].content[0].file_id",
        ),
    ],
)
def test_what_no_tier_here_can_honour_is_a_400_naming_it(
    gw: Gateway, body: dict[str, Any], param: str | None
) -> None:
    error = refused(post(gw, **body), 400, param)
    assert error["type"] == "invalid_request_error" and error["message"]


def test_ten_thousand_items_are_refused_at_once(gw: Gateway) -> None:
    items = [{"role": "user", "content": "hi"}] * 10_000
    started = time.monotonic()
    refused(post(gw, input=items), 400, "input")
    assert time.monotonic() - started < 2


def test_an_unknown_previous_response_is_a_404(gw: Gateway) -> None:
    refused(post(gw, input="hi", previous_response_id="resp_" + "0" * 32), 404, "previous_response_id")


def test_a_long_chain_is_continued_in_bounded_time_then_refused(gw: Gateway) -> None:
    previous = first = None
    seconds = []
    for _ in range(MAX_TURNS):
        started = time.perf_counter()
        resp = post(gw, input="next", previous_response_id=previous)
        seconds.append(time.perf_counter() - started)
        assert resp.status_code == 200, resp.text
        previous = resp.json()["id"]
        first = first or previous
    # The last turn reads every turn before it in one query: it stays fast.
    assert sorted(seconds[-10:])[5] < 0.5, seconds[-10:]
    error = refused(post(gw, input="next", previous_response_id=previous), 400, "previous_response_id")
    assert "start a new one" in error["message"]
    # Nothing was lost: the first turn is still there.
    assert gw.client().responses.retrieve(str(first)).id == first


def test_a_huge_conversation_is_bounded(gw: Gateway) -> None:
    key = tenant_key(gw, "huge")
    previous = None
    for _ in range(3):  # 3 x 300 KiB pass the 768 KiB a continued conversation may take
        resp = post(gw, key, input=BIG, previous_response_id=previous)
        assert resp.status_code == 200, resp.text
        previous = resp.json()["id"]
    error = refused(post(gw, key, input="and?", previous_response_id=previous), 400, "previous_response_id")
    assert "start a new one" in error["message"]
    assert post(gw, key, input="a new one").status_code == 200


def test_a_full_store_refuses_before_running_and_loses_nothing(gw: Gateway) -> None:
    key = tenant_key(gw, "hoarder")
    stored = []
    for _ in range(MAX_PER_TENANT // len(BIG) + 2):
        resp = post(gw, key, input=BIG)
        if resp.status_code != 200:
            break
        stored.append(resp.json()["id"])
    error = refused(resp, 429)
    assert error["code"] == "storage_quota_exceeded" and resp.headers["retry-after"]
    assert len(stored) * len(BIG) >= MAX_PER_TENANT  # refused only at the limit
    assert post(gw, key, input="not kept", store=False).status_code == 200
    auth = {"Authorization": f"Bearer {key}"}
    for response_id in stored:  # everything answered is still there
        assert httpx.get(f"{gw.url}/v1/responses/{response_id}", headers=auth).status_code == 200
    assert httpx.delete(f"{gw.url}/v1/responses/{stored[0]}", headers=auth).status_code == 200
    assert post(gw, key, input="kept again").status_code == 200
