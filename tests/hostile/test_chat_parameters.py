"""Chat Completions parameters against a real gateway (in front of the fake cloud): what OpenAI
refuses is refused the same way (a 400 naming the field), hostile tools and schemas are fast 400s
with bounded memory, a pinned tier that cannot honour a parameter says so, model aliases resolve,
and OpenAI's error shapes (401 type, 405 Allow, 503 Retry-After) hold."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import Gateway
from tests.hostile.conftest import MEDIA_IN_FLIGHT

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "Hello"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def chat(gw: Gateway, **body: Any) -> httpx.Response:
    payload = {"model": "cloud", "messages": HELLO, "max_tokens": 4, **body}
    return httpx.post(f"{gw.url}{CHAT}", json=payload, headers=gw.auth, timeout=30)


def error_of(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text[:500]
    error: dict[str, Any] = resp.json()["error"]
    return error


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"functions": [{"name": "f"}]}, "functions"),  # a field tiergate does not know
        ({"messages": [{"role": "user", "content": "hi", "colour": "red"}]}, "messages[0].colour"),
        ({"tool_choice": "required"}, "tool_choice"),  # without tools
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ({"top_logprobs": 2}, "top_logprobs"),  # without logprobs
        ({"logit_bias": {"hello": 1}}, "logit_bias"),
        ({"n": 99}, "n"),
        ({"metadata": {"k" * 65: "v"}}, "metadata"),
        ({"messages": [{"role": "tool", "content": "42"}]}, "messages[0].tool_call_id"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
        ({"model": "a\u0000b"}, "model"),
        ({"model": "m" * 300}, "model"),
    ],
)
def test_what_openai_refuses_is_a_400_naming_the_field(
    target: Gateway, body: dict[str, Any], param: str
) -> None:
    error = error_of(chat(target, **body), 400)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param, error


def _deep(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


HOSTILE_SCHEMAS = {
    "not an object": {"type": "array", "items": {"type": "string"}},
    "unknown type": {"type": "object", "properties": {"a": {"type": "quaternion"}}},
    "10,000 properties": {
        "type": "object",
        "properties": {f"p{i}": {"type": "string"} for i in range(10_000)},
    },
    "nested 200 deep": _deep(200),
    "remote $ref": {
        "type": "object",
        "properties": {"a": {"$ref": "http://169.254.169.254/latest/meta-data"}},
    },
    "dangling $ref": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
    "bad pattern": {"type": "object", "properties": {"a": {"type": "string", "pattern": "(unclosed"}}},
}


@pytest.mark.parametrize("name", sorted(HOSTILE_SCHEMAS))
def test_a_hostile_tool_schema_is_a_fast_400(target: Gateway, name: str) -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": HOSTILE_SCHEMAS[name]}}
    started = time.perf_counter()
    error = error_of(chat(target, tools=[tool], tool_choice="required"), 400)
    assert time.perf_counter() - started < 2.0
    assert error["param"] == "tools[0].function.parameters", error


def test_a_hostile_response_format_schema_is_a_fast_400(target: Gateway) -> None:
    schema = HOSTILE_SCHEMAS["10,000 properties"]
    fmt = {"type": "json_schema", "json_schema": {"name": "big", "schema": schema}}
    error = error_of(chat(target, response_format=fmt), 400)
    assert error["param"] == "response_format.json_schema.schema"


def test_recursive_and_catastrophic_schemas_are_accepted_or_refused_quickly(target: Gateway) -> None:
    """A recursive $ref is a valid schema (OpenAI takes them); a backtracking-bomb pattern is a
    plain regex to a linear-time engine. Either way the gateway answers at once and stays up."""
    recursive = {
        "$defs": {"node": {"type": "object", "properties": {"child": {"$ref": "#/$defs/node"}}}},
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/node"}},
    }
    bomb = {"type": "object", "properties": {"a": {"type": "string", "pattern": "^(a+)+$"}}}
    for schema in (recursive, bomb):
        fmt = {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
        started = time.perf_counter()
        resp = chat(target, response_format=fmt)
        assert time.perf_counter() - started < 5.0
        assert resp.status_code in (200, 400, 502), resp.text[:300]


def test_memory_stays_bounded_under_hostile_schemas(target: Gateway) -> None:
    def rss_kib() -> int:
        status = Path(f"/proc/{target.process.pid}/status").read_text()
        return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))

    before = rss_kib()
    tool = {"type": "function", "function": {"name": "f", "parameters": HOSTILE_SCHEMAS["10,000 properties"]}}
    for _ in range(30):
        assert chat(target, tools=[tool]).status_code == 400
    assert rss_kib() - before < 64 * 1024  # KiB: well under what 30 held schemas would take


def test_a_pinned_tier_that_cannot_honour_a_parameter_says_which(target: Gateway) -> None:
    error = error_of(chat(target, logit_bias={"42": 5}), 400)  # the fake cloud declares no logit_bias
    assert error["param"] == "logit_bias" and "cannot honour logit_bias" in error["message"]


def test_output_that_breaks_the_tool_choice_is_refused_not_passed_on(target: Gateway) -> None:
    """The fake cloud answers prose whatever the request; a required tool call that is not there is a
    502 that says so, never a 200 that looks like an answer."""
    error = error_of(chat(target, tools=[WEATHER], tool_choice="required"), 502)
    assert error["code"] == "invalid_model_output" and "tool call" in error["message"]
    assert chat(target, tools=[WEATHER], tool_choice="auto").status_code == 200  # prose is allowed


def test_aliases_resolve_are_listed_and_retrievable(target: Gateway) -> None:
    resp = chat(target, model="gpt-4o-mini")
    assert resp.status_code == 200 and resp.headers["X-Tiergate-Tier"] == "cloud"
    fast = chat(target, model="fast")
    assert fast.status_code == 200 and "always" in fast.headers["X-Tiergate-Route-Reason"]
    listed = httpx.get(f"{target.url}/v1/models", headers=target.auth).json()
    assert {"tiergate-auto", "cloud", "gpt-4o-mini", "fast"} <= {m["id"] for m in listed["data"]}
    card = httpx.get(f"{target.url}/v1/models/tiergate-auto", headers=target.auth)
    assert (
        card.status_code == 200 and card.json()["id"] == "tiergate-auto" and card.json()["object"] == "model"
    )
    missing = httpx.get(f"{target.url}/v1/models/gpt-5", headers=target.auth)
    assert error_of(missing, 404)["param"] == "model"
    assert error_of(chat(target, model="gpt-5"), 404)["code"] == "model_not_found"


def test_openai_error_shapes(target: Gateway) -> None:
    unauthorized = httpx.post(f"{target.url}{CHAT}", json={"model": "cloud", "messages": HELLO})
    assert error_of(unauthorized, 401)["type"] == "invalid_request_error"
    wrong_method = httpx.get(f"{target.url}{CHAT}", headers=target.auth)
    assert wrong_method.status_code == 405 and wrong_method.headers["Allow"] == "POST"
    wrong_method = httpx.post(f"{target.url}/v1/models", headers=target.auth)
    assert wrong_method.status_code == 405 and "GET" in wrong_method.headers["Allow"]


def test_metadata_and_friends_are_accepted_and_the_answer_is_openai_shaped(target: Gateway) -> None:
    resp = chat(
        target,
        metadata={"team": "search", "feature": "autocomplete"},
        store=False,
        service_tier="auto",
        user="u-1",
        max_completion_tokens=4,
        top_k=20,
        min_p=0.1,
        repetition_penalty=1.1,
        min_tokens=1,
        stop_token_ids=[2],
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["system_fingerprint"].startswith("tiergate-") and ":cloud:" in body["system_fingerprint"]
    message = body["choices"][0]["message"]
    assert message["role"] == "assistant" and "refusal" in message and body["choices"][0]["logprobs"] is None
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    # the metadata is kept with the request's ledger row (cost by tag reads it)
    request_id = resp.headers["X-Request-ID"]
    deadline = time.monotonic() + 10
    rows: list[tuple[str]] = []
    while not rows and time.monotonic() < deadline:
        with sqlite3.connect(target.data_dir / "tiergate.db") as db:
            rows = db.execute("SELECT metadata FROM ledger WHERE request_id = ?", (request_id,)).fetchall()
        time.sleep(0.2)
    assert rows and json.loads(rows[0][0]) == {"team": "search", "feature": "autocomplete"}


NOT_AN_IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,bm90IGFuIGltYWdl"}}


def _with_image(parts: int = 1) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is this?"}, *[NOT_AN_IMAGE] * parts]}]


def test_cheap_checks_come_before_any_media_work(target: Gateway) -> None:
    """Bytes that are no image are a 415 once decoded; an unknown model or a tenant over its limit is refused
    before the gateway fetches or decodes anything: the answer is the 404 or 429, not the 415."""
    assert error_of(chat(target, messages=_with_image()), 415)["code"] == "unsupported_media"
    assert error_of(chat(target, model="gpt-5", messages=_with_image()), 404)["code"] == "model_not_found"
    admin = {"Authorization": f"Bearer {target.admin_key}"}
    tenant = {"name": "one-a-minute", "limits": {"requests_per_min": 1}}
    assert httpx.post(f"{target.url}/admin/api/tenants", json=tenant, headers=admin).status_code in (200, 201)
    key = httpx.post(f"{target.url}/admin/api/tenants/one-a-minute/keys", json={}, headers=admin).json()[
        "key"
    ]
    limited = {"Authorization": f"Bearer {key}"}
    while time.time() % 60 > 55:  # both requests in one clock minute
        time.sleep(1)
    body = {"model": "cloud", "messages": HELLO, "max_tokens": 2}
    assert httpx.post(f"{target.url}{CHAT}", json=body, headers=limited, timeout=30).status_code == 200
    body["messages"] = _with_image()
    over = httpx.post(f"{target.url}{CHAT}", json=body, headers=limited, timeout=30)
    assert error_of(over, 429)["code"] == "rate_limit_exceeded"


def test_media_parts_in_preparation_are_capped_with_a_429(target: Gateway) -> None:
    resp = chat(target, messages=_with_image(MEDIA_IN_FLIGHT + 1))
    error = error_of(resp, 429)
    assert "media.max_in_flight" in error["message"] and int(resp.headers["Retry-After"]) >= 1
