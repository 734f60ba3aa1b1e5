"""The fields of OpenAI's request schemas that its clients send (gateway/wire/fields.py), through the
official ``openai`` SDK on every tier (the llama.cpp edge, ``tiergate-auto``, and the local vLLM server
for ``cloud``): what is honoured changes the answer as OpenAI's would, what is refused gets OpenAI's
error, and the answers validate against OpenAI's schema.  Also the SDK's helpers that lean on them:
``responses.input_items.list``, ``chat.completions.parse`` with ``pydantic_function_tool``."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from tests.conftest import EVERY_TIER, FRESH, Gateway
from tests.openai_schema import validate

HELLO = [{"role": "user", "content": "Say hello."}]


class GetWeather(BaseModel):
    """Get the current weather in a city."""

    city: str


def chunks(gw: Gateway, body: dict[str, Any]) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {gw.api_key}", **FRESH}
    out = []
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line.removeprefix("data: "))
                validate("CreateChatCompletionStreamResponse", chunk)
                out.append(chunk)
    return out


@EVERY_TIER
def test_chat_takes_the_fields_new_clients_send(tier_client: openai.OpenAI, model: str) -> None:
    raw = tier_client.chat.completions.with_raw_response.create(
        model=model,
        messages=HELLO,  # type: ignore[arg-type]
        max_completion_tokens=8,
        temperature=0,
        reasoning_effort="low",
        prompt_cache_key="tenant-a/conversation-1",
        prompt_cache_retention="in_memory",
        safety_identifier="user-hash-1234",
        verbosity="medium",
        modalities=["text"],
    )
    validate("CreateChatCompletionResponse", raw.http_response.json())
    answer = raw.parse()
    assert answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens > 0


@EVERY_TIER
def test_include_obfuscation_pads_every_delta_chunk_only_when_asked(tier_gw: Gateway, model: str) -> None:
    body = {"model": model, "messages": HELLO, "max_tokens": 6, "temperature": 0, "stream": True}
    padded = chunks(tier_gw, {**body, "stream_options": {"include_obfuscation": True}})
    deltas = [c for c in padded if c["choices"]]
    assert deltas and all(1 <= len(c["obfuscation"]) <= 32 for c in deltas)
    assert len({c["obfuscation"] for c in deltas}) > 1 or len(deltas) == 1  # random each time
    plain = chunks(tier_gw, {**body, "stream_options": {"include_obfuscation": False}})
    assert plain and not any("obfuscation" in c for c in plain)


@EVERY_TIER
def test_prompt_cache_key_is_the_affinity_key_and_null_fields_are_left_out(
    tier_gw: Gateway, model: str
) -> None:
    headers = {"Authorization": f"Bearer {tier_gw.api_key}", **FRESH}
    body = {"model": model, "messages": HELLO, "max_tokens": 4, "temperature": 0, "n": None, "stream": None}
    instances = set()
    for _ in range(3):
        resp = httpx.post(
            f"{tier_gw.url}/v1/chat/completions",
            json={**body, "prompt_cache_key": "k-7"},
            headers=headers,
            timeout=120,
        )
        assert resp.status_code == 200, resp.text
        assert len(resp.json()["choices"]) == 1 and resp.json()["object"] == "chat.completion"
        instances.add(resp.headers.get("x-tiergate-instance"))
    assert len(instances) == 1  # one replica / engine instance for one key


def test_refused_fields_get_openais_error(gateway: Gateway) -> None:
    client = gateway.client()
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="edge",
            messages=HELLO,  # type: ignore[arg-type]
            audio={"voice": "alloy", "format": "wav"},
            modalities=["text", "audio"],
        )
    error = refused.value.body
    assert isinstance(error, dict)
    assert error["code"] in ("unsupported_parameter", "unsupported_value")
    assert error["param"] in ("audio", "modalities")
    with pytest.raises(openai.BadRequestError) as low:
        client.chat.completions.create(model="edge", messages=HELLO, verbosity="low")  # type: ignore[arg-type]
    assert isinstance(low.value.body, dict)
    assert (low.value.body["code"], low.value.body["param"]) == ("unsupported_value", "verbosity")
    with pytest.raises(openai.BadRequestError) as hot:
        client.chat.completions.create(model="edge", messages=HELLO, temperature=5)  # type: ignore[arg-type]
    assert isinstance(hot.value.body, dict)
    assert (hot.value.body["code"], hot.value.body["param"]) == ("decimal_above_max_value", "temperature")


@EVERY_TIER
def test_responses_take_the_fields_new_clients_send(tier_client: openai.OpenAI, model: str) -> None:
    raw = tier_client.responses.with_raw_response.create(
        model=model,
        input="Say hello.",
        max_output_tokens=8,
        temperature=0,
        reasoning={"effort": "low"},
        prompt_cache_key="k-responses",
        safety_identifier="user-hash-5678",
        text={"verbosity": "medium"},
    )
    body = raw.http_response.json()
    validate("Response", body)
    assert body["reasoning"] == {"effort": "low", "summary": None}
    assert body["safety_identifier"] == "user-hash-5678" and body["prompt_cache_key"] == "k-responses"
    response = raw.parse()
    assert response.output_text


@EVERY_TIER
def test_max_tool_calls_drops_the_calls_past_it(tier_client: openai.OpenAI, model: str) -> None:
    tool = openai.pydantic_function_tool(GetWeather)["function"]
    for most in (0, 1):
        response = tier_client.responses.create(
            model=model,
            input="What is the weather in Paris?",
            tools=[{"type": "function", **tool}],  # type: ignore[list-item]
            tool_choice="required",
            max_tool_calls=most,
            max_output_tokens=48,
            temperature=0,
        )
        assert response.max_tool_calls == most
        assert len([i for i in response.output if i.type == "function_call"]) == most


def test_input_items_are_listed_and_paged_as_openai_does(gateway: Gateway) -> None:
    client = gateway.client(default_headers=FRESH)
    items = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": "Hello Ada."},
        {"role": "user", "content": "What is my name?"},
    ]
    response = client.responses.create(model="edge", input=items, max_output_tokens=8, temperature=0)  # type: ignore[arg-type]
    listed = client.responses.input_items.list(response.id, order="asc")
    assert [i.role for i in listed.data] == ["user", "assistant", "user"]  # type: ignore[union-attr]
    assert listed.data[0].content[0].text == "My name is Ada."  # type: ignore[union-attr]
    newest = client.responses.input_items.list(response.id, limit=2)  # desc by default
    assert [i.id for i in newest.data] == [i.id for i in listed.data][::-1][:2]
    assert newest.has_more
    rest = client.responses.input_items.list(response.id, limit=2, after=newest.data[-1].id)
    assert [i.id for i in rest.data] == [listed.data[0].id] and not rest.has_more
    every = [i.id for i in client.responses.input_items.list(response.id, limit=1)]  # the SDK pages
    assert every == [i.id for i in listed.data][::-1]
    other = httpx.get(
        f"{gateway.url}/v1/responses/{response.id}/input_items",
        headers={"Authorization": f"Bearer {gateway.api_key}"},
        params={"limit": 101},
    )
    assert other.status_code == 400 and other.json()["error"]["param"] == "limit"


@EVERY_TIER
def test_chat_parse_with_a_pydantic_function_tool(tier_client: openai.OpenAI, model: str) -> None:
    parsed = tier_client.chat.completions.parse(
        model=model,
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
        tools=[openai.pydantic_function_tool(GetWeather)],
        tool_choice="required",
        max_tokens=48,
        temperature=0,
    )
    calls = parsed.choices[0].message.tool_calls
    assert calls and isinstance(calls[0].function.parsed_arguments, GetWeather)
