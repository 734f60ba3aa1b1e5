"""Anthropic's Messages API through the official ``anthropic`` client, against real tiers (the llama.cpp
edge, ``tiergate-auto``, and the local vLLM server for ``cloud``), as the Responses API tests run.

Asserted is Anthropic's behaviour as its SDK reads it: a ``Message`` with its content blocks, stop
reason and usage; a stream's events in Anthropic's order (``text_stream`` and ``get_final_message``
agree); a ``tool_use`` block and its ``tool_result`` sent back (the answer's blocks passed back as
``response.content`` and as each block's ``model_dump()``); the SDK's newer fields (``output_config``,
``diagnostics``, a ``system`` turn, ``workspace_id``, ``thinking``); a tool call's input streamed as
``input_json_delta``; ``count_tokens``; an image block; a stop sequence named; a bad key and an
unknown model as the SDK's own errors; the ledger row and the cost report.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import anthropic
import httpx
import jsonschema
import pytest
from anthropic.types import Message, TextBlock, ToolUseBlock

from tests import media_files
from tests.conftest import AUTO, CLOUD, EDGE, EVERY_TIER, FRESH, Gateway
from tests.integration.test_tenants_api import admin, ledger_rows

WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "Get the current weather in a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city, e.g. Paris"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris right now?"}]
CALL_TOKENS = 96


@pytest.fixture
def gw(tier_gw: Gateway) -> Gateway:
    return tier_gw


@pytest.fixture
def client(gw: Gateway) -> anthropic.Anthropic:
    return gw.anthropic(default_headers=FRESH, timeout=120)  # type: ignore[no-any-return]


# The SDK (2.x) has no temperature parameter any more (Anthropic's newest models take none); the API
# still takes it, and so does tiergate: sent as an extra field.
GREEDY = {"extra_body": {"temperature": 0}}


def create(client: anthropic.Anthropic, model: str, **params: Any) -> Message:
    params = {"max_tokens": 24, "messages": [{"role": "user", "content": "Hi."}], **GREEDY, **params}
    return client.messages.create(model=model, **params)


def raw_events(gw: Gateway, body: dict[str, Any]) -> list[dict[str, Any]]:
    """A streamed message's events as sent: each ``event:`` line names its ``data:``'s type."""
    headers = {"x-api-key": gw.api_key, "anthropic-version": "2023-06-01", **FRESH}
    events = []
    with httpx.stream("POST", f"{gw.url}/v1/messages", json=body, headers=headers, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["x-tiergate-tier"]
        kind = None
        for line in resp.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                event = json.loads(line.removeprefix("data: "))
                assert event["type"] == kind
                events.append(event)
    return events


@EVERY_TIER
def test_create_answers_a_message(client: anthropic.Anthropic, model: str) -> None:
    raw = client.messages.with_raw_response.create(
        model=model,
        max_tokens=16,
        system="Be brief.",
        **GREEDY,
        messages=[{"role": "user", "content": "Say hello in one short sentence."}],
    )
    assert raw.headers["x-tiergate-tier"] in ("edge", "cloud") and raw.headers["x-tiergate-route-reason"]
    message = raw.parse()
    assert isinstance(message, Message)
    assert message._request_id == raw.headers["x-request-id"]  # the SDK reads Anthropic's request-id
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert isinstance(message.content[0], TextBlock) and message.content[0].text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens") and message.stop_sequence is None
    assert message.usage.input_tokens > 0 and 0 < message.usage.output_tokens <= 16


@EVERY_TIER
def test_stream_text_and_final_message_agree(client: anthropic.Anthropic, model: str) -> None:
    with client.messages.stream(
        model=model, max_tokens=16, messages=[{"role": "user", "content": "Count to five."}], **GREEDY
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip() and isinstance(final.content[0], TextBlock) and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.input_tokens > 0 and final.usage.output_tokens > 0


def test_a_stream_is_anthropics_event_sequence(gateway: Gateway) -> None:
    body = {"model": EDGE, "max_tokens": 8, "temperature": 0, "stream": True, "messages": ASK_WEATHER}
    kinds = [e["type"] for e in raw_events(gateway, body)]
    assert kinds[:3] == ["message_start", "ping", "content_block_start"], kinds
    assert set(kinds[3:-3]) == {"content_block_delta"}, kinds
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"], kinds


@EVERY_TIER
@pytest.mark.parametrize("passed_back", ["content", "model_dump"])
def test_a_tool_use_and_its_result_sent_back(
    client: anthropic.Anthropic, model: str, passed_back: str
) -> None:
    """The answer's blocks passed back as ``response.content`` (the SDK serialises its models) or as
    each block's ``model_dump()`` (every field of the SDK's models, None included: ``caller``,
    ``toolset_name``, ``citations``), with a ``cache_control`` on the result, as the SDK's types allow."""
    first = create(
        client,
        model,
        messages=ASK_WEATHER,
        tools=[WEATHER],
        tool_choice={"type": "any"},
        max_tokens=CALL_TOKENS,
    )
    calls = [b for b in first.content if isinstance(b, ToolUseBlock)]
    assert calls and first.stop_reason == "tool_use", first
    call = calls[0]
    assert call.id.startswith("toolu_") and call.name == "get_weather"
    jsonschema.validate(call.input, WEATHER["input_schema"])
    blocks: Any = first.content if passed_back == "content" else [b.model_dump() for b in first.content]
    if passed_back == "model_dump":
        assert {"caller", "toolset_name"} <= set(blocks[-1]), blocks
    result = {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": "sunny, 21 degrees",
        "cache_control": {"type": "ephemeral"},
    }
    second = create(
        client,
        model,
        messages=[
            *ASK_WEATHER,
            {"role": "assistant", "content": blocks},
            {"role": "user", "content": [result]},
        ],
        tools=[WEATHER],
        max_tokens=32,
    )
    assert second.content and second.stop_reason in ("end_turn", "max_tokens", "tool_use")


def test_the_sdks_newer_fields_are_honoured(gateway: Gateway) -> None:
    """Fields of the SDK's types that change the answer or say who asks, through the SDK's own
    arguments: ``output_config.format`` constrains the text, ``diagnostics`` is answered, a ``system``
    turn and the headers ``user_profile_id`` and ``workspace_id`` (the key's tenant) are taken."""
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    client = gateway.anthropic(default_headers=FRESH, timeout=120)
    message = client.messages.create(
        model=EDGE,
        max_tokens=32,
        messages=[
            {"role": "system", "content": "Answer in JSON."},
            {"role": "user", "content": "Is water wet?"},
        ],
        output_config={"format": {"type": "json_schema", "schema": schema}},
        diagnostics={"previous_message_id": None},
        user_profile_id="profile-1",
        workspace_id="default",
        **GREEDY,
    )
    assert isinstance(message.content[0], TextBlock)
    jsonschema.validate(json.loads(message.content[0].text), schema)
    assert message.diagnostics is not None and message.diagnostics.cache_miss_reason is not None
    assert message.diagnostics.cache_miss_reason.type == "unavailable"
    with pytest.raises(anthropic.PermissionDeniedError):
        create(client, EDGE, workspace_id="wrkspc_someone_else")
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(client, EDGE, thinking={"type": "enabled", "budget_tokens": 1024})
    error: Any = caught.value.body
    assert error["error"]["message"] == '"thinking.type.enabled" is not supported for this model'


@EVERY_TIER
def test_a_streamed_tool_use_sends_its_input_as_json_deltas(
    gw: Gateway, client: anthropic.Anthropic, model: str
) -> None:
    body = {
        "model": model,
        "max_tokens": CALL_TOKENS,
        "temperature": 0,
        "messages": ASK_WEATHER,
        "tools": [WEATHER],
        "tool_choice": {"type": "tool", "name": "get_weather"},
    }
    events = raw_events(gw, {**body, "stream": True})
    started = [e for e in events if e["type"] == "content_block_start"]
    assert (
        started[0]["content_block"]["type"] == "tool_use"
        and started[0]["content_block"]["name"] == "get_weather"
    )
    assert started[0]["content_block"]["input"] == {}
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert deltas and all(d["type"] == "input_json_delta" for d in deltas)
    jsonschema.validate(json.loads("".join(d["partial_json"] for d in deltas)), WEATHER["input_schema"])
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    sdk = {k: v for k, v in body.items() if k != "temperature"}
    with client.messages.stream(**sdk, **GREEDY) as stream:  # the SDK's accumulation of the same
        final = stream.get_final_message()
    (call,) = [b for b in final.content if isinstance(b, ToolUseBlock)]
    jsonschema.validate(call.input, WEATHER["input_schema"])


@EVERY_TIER
def test_count_tokens(client: anthropic.Anthropic, model: str) -> None:
    short = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "Hi."}])
    long = client.messages.count_tokens(
        model=model, system="Be brief.", messages=[{"role": "user", "content": "Tell me about Paris. " * 20}]
    )
    assert 0 < short.input_tokens < long.input_tokens


def image_turn() -> list[dict[str, Any]]:
    data = media_files.b64(media_files.png(64, 48))
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": data}}
    return [{"role": "user", "content": [image, {"type": "text", "text": "What is in this picture?"}]}]


@pytest.mark.parametrize("model", [CLOUD])
def test_an_image_block(client: anthropic.Anthropic, model: str) -> None:
    """The cloud's vision model reads it: its prompt counts the image's tokens."""
    with_image = create(client, model, messages=image_turn(), max_tokens=8)
    text_only = create(
        client, model, messages=[{"role": "user", "content": "What is in this picture?"}], max_tokens=8
    )
    assert isinstance(with_image.content[0], TextBlock)
    assert with_image.usage.input_tokens > text_only.usage.input_tokens + 8


def test_an_image_block_pinned_to_the_text_only_edge_is_refused(gateway: Gateway) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(gateway.anthropic(), EDGE, messages=image_turn())
    assert "edge does not accept image" in caught.value.message


def test_an_image_url_to_loopback_is_refused_as_anthropic_says(gateway: Gateway) -> None:
    image = {"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/cat.png"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(gateway.anthropic(), AUTO, messages=[{"role": "user", "content": [image]}])
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]


@pytest.mark.parametrize("model", [EDGE, CLOUD])
def test_a_stop_sequence_is_named(client: anthropic.Anthropic, model: str) -> None:
    ask = [{"role": "user", "content": "List the numbers from 1 to 10, separated by commas."}]
    message = create(client, model, messages=ask, stop_sequences=[","], max_tokens=32)
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", ","), message
    assert "," not in message.content[0].text  # type: ignore[union-attr]


def test_a_bad_key_and_an_unknown_model_are_the_sdks_errors(gateway: Gateway) -> None:
    with pytest.raises(anthropic.AuthenticationError) as bad_key:
        create(gateway.anthropic(api_key="tg_nope_wrong"), EDGE)
    assert bad_key.value.status_code == 401
    assert bad_key.value.body == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "invalid API key"},
    }
    with pytest.raises(anthropic.NotFoundError) as unknown:
        create(gateway.anthropic(), "claude-sonnet-4-5")
    assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    assert "claude-sonnet-4-5" in unknown.value.message
    missing = httpx.post(  # max_tokens is required, as Anthropic requires it
        f"{gateway.url}/v1/messages",
        json={"model": EDGE, "messages": ASK_WEATHER},
        headers={"x-api-key": gateway.api_key},
    )
    assert missing.status_code == 400 and missing.json()["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in missing.json()["error"]["message"]
    # The same key as a bearer token (the SDK's auth_token) is the same caller.
    bearer = anthropic.Anthropic(base_url=gateway.url, auth_token=gateway.api_key, max_retries=0)
    assert create(bearer, EDGE, max_tokens=4).content


def test_a_repeat_is_answered_from_the_result_cache_json_and_streamed(gateway: Gateway) -> None:
    client = gateway.anthropic()
    ask = [{"role": "user", "content": f"Name a colour. ({uuid.uuid4().hex[:6]})"}]
    first = client.messages.with_raw_response.create(model=EDGE, max_tokens=8, messages=ask, **GREEDY)
    again = client.messages.with_raw_response.create(model=EDGE, max_tokens=8, messages=ask, **GREEDY)
    assert (first.headers["x-tiergate-cache"], again.headers["x-tiergate-cache"]) == ("miss", "hit")
    assert again.parse().content[0].text == first.parse().content[0].text  # type: ignore[union-attr]
    assert again.parse().id != first.parse().id
    with client.messages.stream(model=EDGE, max_tokens=8, messages=ask, **GREEDY) as stream:
        assert stream.response.headers["x-tiergate-cache"] == "hit"
        assert stream.get_final_message().content[0].text == first.parse().content[0].text  # type: ignore[union-attr]


def test_the_ledger_and_the_cost_report_show_the_request(gateway: Gateway) -> None:
    rid = f"messages-{uuid.uuid4().hex[:8]}"
    client = gateway.anthropic(default_headers={**FRESH, "X-Request-ID": rid})
    message = create(client, EDGE, max_tokens=8)
    row = ledger_rows(gateway, want={rid})[rid]
    assert (row.status, row.tier, row.endpoint) == (200, "edge", "messages"), row
    # Anthropic's input_tokens leave out what was read from a cache (here the edge's prefix cache)
    usage = message.usage
    assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens) == (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0),
        usage.cache_read_input_tokens or 0,
        usage.output_tokens,
    )
    assert 0 < row.cost_nusd < row.counterfactual_nusd  # the edge, against the same tokens on the cloud
    time.sleep(0.3)  # the report reads the database, which the ledger's loader fills
    report = admin(gateway, "GET", "/reports/costs?tenant=default&group_by=endpoint").json()
    assert any(r["endpoint"] == "messages" and r["requests"] >= 1 for r in report["rows"]), report
