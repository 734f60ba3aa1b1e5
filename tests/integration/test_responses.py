"""The Responses API through the official ``openai`` client and an openai-agents agent, against real tiers
(the llama.cpp edge, ``tiergate-auto``, and the local vLLM server for ``cloud``).

Asserted is OpenAI's behaviour: the response object and its output items, the event sequence of a
stream, function calls and their results sent back, ``text.format`` json_schema, a conversation
continued with ``previous_response_id``, stored responses retrieved and deleted, another tenant
refused. Every answer and every event is also checked against OpenAI's OpenAPI document.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel

from tests.agent_turn import weather_turn
from tests.conftest import EDGE, EVERY_TIER, FRESH, Gateway
from tests.openai_schema import validate

WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}
CALL_TOKENS = 96


class City(BaseModel):
    city: str
    country: str


@pytest.fixture
def gw(tier_gw: Gateway) -> Gateway:
    return tier_gw


@pytest.fixture
def client(gw: Gateway) -> openai.OpenAI:
    return gw.client(default_headers=FRESH, timeout=120)


def create(client: openai.OpenAI, model: str, **params: Any) -> Any:
    """``responses.create`` at temperature 0; the raw body is checked against OpenAI's schema."""
    raw = client.responses.with_raw_response.create(
        model=model, **{"temperature": 0, "max_output_tokens": 24, **params}
    )
    validate("Response", raw.http_response.json())
    return raw.parse()


def raw_events(gw: Gateway, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed response's events as sent (``event:`` and ``data:`` lines), each schema-checked."""
    headers = {"Authorization": f"Bearer {gw.api_key}", **FRESH}
    events = []
    with httpx.stream("POST", f"{gw.url}/v1/responses", json=body, headers=headers, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        kind = None
        for line in resp.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == kind
                validate("ResponseStreamEvent", event)
                events.append(event)
    return events


@EVERY_TIER
def test_a_plain_response_has_a_message_with_output_text(client: openai.OpenAI, model: str) -> None:
    response = create(client, model, input="Say hello in one short sentence.", instructions="Be brief.")
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status in ("completed", "incomplete")
    message = response.output[0]
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].type == "output_text"
    assert response.output_text == message.content[0].text and response.output_text.strip()
    assert response.instructions == "Be brief."
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    if response.status == "incomplete":
        assert response.incomplete_details.reason == "max_output_tokens"


@EVERY_TIER
def test_a_stream_is_openais_event_sequence(gw: Gateway, client: openai.OpenAI, model: str) -> None:
    body = {"model": model, "input": "Count from one to five.", "max_output_tokens": 16}
    events = raw_events(gw, {**body, "temperature": 0, "stream": True})
    kinds = [e["type"] for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ], kinds
    assert kinds[-4:-1] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert kinds[-1] in ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in events] == list(range(1, len(events) + 1))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    final = events[-1]["response"]
    assert deltas and final["output_text"] == deltas
    assert final["output"][0]["id"] == events[2]["item"]["id"]
    # The SDK's own reader agrees.
    read = list(client.responses.create(**body, temperature=0, stream=True))
    text = "".join(e.delta for e in read if e.type == "response.output_text.delta")
    assert read[-1].type in ("response.completed", "response.incomplete")
    assert read[-1].response.output_text == text


@EVERY_TIER
def test_a_function_call_and_its_result_sent_back(client: openai.OpenAI, model: str) -> None:
    ask = "What is the weather in Paris right now?"
    first = create(
        client, model, input=ask, tools=[WEATHER], tool_choice="required", max_output_tokens=CALL_TOKENS
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert calls, first.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.id.startswith("fc_")
    jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
    result = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 degrees"}
    # The client sends the conversation itself (no previous_response_id): its input items, the call, the result.
    second = create(
        client, model, input=[{"role": "user", "content": ask}, *first.output, result], tools=[WEATHER]
    )
    assert second.output[0].type in ("message", "function_call")


@EVERY_TIER
def test_a_streamed_function_call(gw: Gateway, model: str) -> None:
    body = {
        "model": model,
        "input": "What is the weather in Paris right now?",
        "tools": [WEATHER],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": CALL_TOKENS,
        "stream": True,
        "temperature": 0,
    }
    events = raw_events(gw, body)
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert added[0]["item"]["type"] == "function_call" and added[0]["item"]["name"] == "get_weather"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta")
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert done["arguments"] == deltas
    jsonschema.validate(json.loads(deltas), WEATHER["parameters"])
    assert events[-1]["type"] == "response.completed"


@EVERY_TIER
def test_text_format_json_schema_and_parse(client: openai.OpenAI, model: str) -> None:
    schema = City.model_json_schema() | {"additionalProperties": False}
    fmt = {"type": "json_schema", "name": "city", "schema": schema, "strict": True}
    response = create(
        client, model, input="Name a city and its country.", text={"format": fmt}, max_output_tokens=48
    )
    City.model_validate_json(response.output_text)
    parsed = client.responses.parse(
        model=model,
        input="Name a city and its country.",
        text_format=City,
        temperature=0,
        max_output_tokens=48,
    )
    assert isinstance(parsed.output_parsed, City)


@EVERY_TIER
def test_a_conversation_continued_retrieved_and_deleted(client: openai.OpenAI, model: str) -> None:
    first = create(client, model, input="My name is Ada. Say hi.", max_output_tokens=12)
    second = create(
        client, model, input="What is my name?", previous_response_id=first.id, max_output_tokens=12
    )
    assert second.previous_response_id == first.id
    # The second turn's prompt holds the first turn's input and answer.
    assert second.usage.input_tokens >= first.usage.input_tokens + first.usage.output_tokens
    again = client.responses.retrieve(first.id)
    assert again.id == first.id and again.output_text == first.output_text
    deleted = client.responses.delete(first.id)
    assert deleted is None or getattr(deleted, "deleted", True)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    with pytest.raises(openai.NotFoundError, match="deleted or expired"):  # the chain lost its first turn
        create(client, model, input="And again?", previous_response_id=second.id)
    unstored = create(client, model, input="Say hi.", store=False, max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def _other_tenant_key(gw: Gateway, name: str) -> str:
    admin = {"Authorization": f"Bearer {gw.admin_key}"}
    httpx.post(f"{gw.url}/admin/api/tenants", json={"name": name}, headers=admin)
    resp = httpx.post(f"{gw.url}/admin/api/tenants/{name}/keys", json={}, headers=admin)
    assert resp.status_code in (200, 201), resp.text
    return str(resp.json()["key"])


def test_another_tenant_cannot_read_continue_or_delete_a_response(gateway: Gateway) -> None:
    mine = gateway.client(default_headers=FRESH, timeout=120)
    theirs = openai.OpenAI(
        base_url=f"{gateway.url}/v1", api_key=_other_tenant_key(gateway, "other"), max_retries=0
    )
    response = create(mine, EDGE, input="A secret: the code is 4711.", max_output_tokens=4)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.retrieve(response.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.create(model=EDGE, input="What was the code?", previous_response_id=response.id)
    with pytest.raises(openai.NotFoundError):
        theirs.responses.delete(response.id)
    assert mine.responses.retrieve(response.id).id == response.id  # still there for its tenant
    admin = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=gateway.admin_key, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        admin.responses.retrieve(response.id)


def test_logprobs_ride_with_the_output_text(gateway: Gateway) -> None:
    client = gateway.client(default_headers=FRESH, timeout=120)
    response = create(
        client,
        EDGE,
        input="Say yes.",
        include=["message.output_text.logprobs"],
        top_logprobs=2,
        max_output_tokens=4,
    )
    scores = response.output[0].content[0].logprobs
    assert len(scores) == response.usage.output_tokens
    assert all(len(s.top_logprobs) == 2 and s.logprob <= 0 for s in scores)


def test_an_agent_runs_a_turn_over_the_responses_api(gateway: Gateway) -> None:
    from agents import OpenAIResponsesModel

    def model(client: openai.AsyncOpenAI) -> OpenAIResponsesModel:
        return OpenAIResponsesModel(model=EDGE, openai_client=client)

    final = weather_turn(gateway, model, CALL_TOKENS)
    assert isinstance(final, str) and final.strip()
