"""A gateway with two provider tiers of protocol ``anthropic`` (``claude``, and ``backup`` behind it),
each at an Anthropic stand-in over TLS, used by the official ``anthropic`` and ``openai`` SDKs:
``/v1/messages``, chat completions and Responses, JSON and streamed, tools, an image, stop sequences,
structured output, each answer checked against the SDK's types or OpenAI's schema; what each fault of
the provider becomes for the client; cache reads and writes billed at their prices.  One gateway for
the module (no edge, no vLLM: only the stand-ins answer)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import anthropic.types as at
import httpx
import openai
import pytest

from tests.conftest import Gateway, start_gateway
from tests.integration.test_tenants_api import ledger_rows
from tests.media_files import b64, png
from tests.openai_schema import validate
from tests.standins.anthropic_provider import KEY, AnthropicStandIn

HELLO = [{"role": "user", "content": "Say hello."}]
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PRICES = {"prompt": 0.003, "completion": 0.015, "read": 0.0003, "write": 0.00375}  # USD per 1k tokens


def _tier(name: str, standin: AnthropicStandIn, extra: str = "") -> str:
    return f"""
[tiers.{name}]
kind = "provider"
protocol = "anthropic"
base_url = "{standin.url}"
model = "{name}-standin"
api_key_env = "TG_TEST_ANTHROPIC_KEY"
ca_file = "{standin.ca_file}"
context_tokens = 200000
key_retry_s = 1
{extra}
[tiers.{name}.timeouts]
first_byte_s = 1.0
"""


@pytest.fixture(scope="module")
def stands(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AnthropicStandIn, AnthropicStandIn]]:
    folder = tmp_path_factory.mktemp("anthropic-standins")
    with (
        AnthropicStandIn(folder / "claude") as claude,
        AnthropicStandIn(folder / "backup", reply="Hello from the backup") as backup,
    ):
        yield claude, backup


@pytest.fixture(scope="module")
def claude(stands: tuple[AnthropicStandIn, AnthropicStandIn]) -> AnthropicStandIn:
    return stands[0]


@pytest.fixture(scope="module")
def backup(stands: tuple[AnthropicStandIn, AnthropicStandIn]) -> AnthropicStandIn:
    return stands[1]


@pytest.fixture(scope="module")
def gw(
    stands: tuple[AnthropicStandIn, AnthropicStandIn], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    claude, backup = stands
    config = (
        "[edge]\nenabled = false\n[cloud]\nenabled = false\n[ledger]\nflush_interval_s = 0.1\n"
        # the faults here are injected one by one: no breaker counting them across tests
        "[breakers]\nconsecutive_failures = 50\nmin_calls = 200\ncooldown_s = 1.0\n"
        + _tier("claude", claude, "cache_prefix = true")
        + _tier("backup", backup)
        + f"""
[[pricing.prices]]
tier = "claude"
prompt_per_1k = {PRICES["prompt"]}
completion_per_1k = {PRICES["completion"]}
cached_prompt_per_1k = {PRICES["read"]}
cache_write_per_1k = {PRICES["write"]}

[policies.default]
strategy = "always:claude"
cache = false
"""
    )
    gateway = start_gateway(
        tmp_path_factory.mktemp("anthropic-gw"), config, env={"TG_TEST_ANTHROPIC_KEY": KEY}, edge=False
    )
    gateway.wait(lambda: gateway.tier_health("claude") == "ready", 30, "the claude tier")
    yield gateway
    gateway.stop()


@pytest.fixture(autouse=True)
def _calm(claude: AnthropicStandIn, backup: AnthropicStandIn, gw: Gateway) -> Iterator[None]:
    """Each test starts with no fault pending, claude ready and its breaker not open (a refused key
    opens it; its cool-down here is a second), and ends with every body tiergate sent taken by the
    stand-ins' checks (the SDK's parameter types, the headers)."""
    claude.fail("", 0)
    gw.wait(
        lambda: (
            gw.tier_health("claude") == "ready"
            and all(b["state"] != "open" for b in gw.readyz()["breakers"] if b["tier"] == "claude")
        ),
        15,
        "claude ready again",
    )
    yield
    assert claude.refused == [] and backup.refused == []


# -- Anthropic's SDK on /v1/messages ---------------------------------------------------------------


def test_messages_json_with_an_image_and_a_stop_sequence(gw: Gateway, claude: AnthropicStandIn) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(png())}}
    raw = gw.anthropic().messages.with_raw_response.create(
        model="claude",
        max_tokens=100,
        system="Be brief.",
        stop_sequences=["images"],
        messages=[{"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]}],
    )
    message = raw.parse()
    at.Message.model_validate_json(raw.http_response.text)
    assert raw.headers["x-tiergate-tier"] == "claude"
    assert message.content[0].type == "text"
    assert message.content[0].text == "Hello from the stand-in: 1 turns, 1 "
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "images")
    sent = claude.requests[-1]
    assert sent["model"] == "claude-standin" and sent["stop_sequences"] == ["images"]
    assert sent["system"][0]["text"] == "Be brief."
    assert sent["messages"][0]["content"][1]["source"]["type"] == "base64"


def test_messages_stream(gw: Gateway) -> None:
    with gw.anthropic().messages.stream(model="claude", max_tokens=100, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello from the stand-in: 1 turns, 0 images, done."
    assert final.content[0].type == "text" and final.content[0].text == text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0


def test_messages_tool_use_and_tool_result_round_trip(gw: Gateway, claude: AnthropicStandIn) -> None:
    client = gw.anthropic()
    tools: Any = [{"name": "weather", "description": "The weather in a city", "input_schema": WEATHER_SCHEMA}]
    ask: Any = [{"role": "user", "content": "Weather in Oslo?"}]
    first = client.messages.create(
        model="claude", max_tokens=100, tools=tools, tool_choice={"type": "any"}, messages=ask
    )
    call = first.content[-1]
    assert call.type == "tool_use" and call.name == "weather" and call.input == {"city": "Paris"}
    assert first.stop_reason == "tool_use"
    assert claude.requests[-1]["tool_choice"] == {"type": "any"}
    turn = [
        *ask,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "snow"}]},
    ]
    second = client.messages.create(model="claude", max_tokens=100, tools=tools, messages=turn)
    assert second.content[0].type == "text"
    assert second.content[0].text == 'Hello from the stand-in: the tool said "snow"'
    sent = claude.requests[-1]["messages"]
    assert sent[1]["content"][-1] == {
        "type": "tool_use",
        "id": call.id,
        "name": "weather",
        "input": {"city": "Paris"},
    }
    assert sent[2]["content"] == [{"type": "tool_result", "tool_use_id": call.id, "content": "snow"}]


# -- OpenAI's SDK: chat completions and Responses ------------------------------------------------------


def test_chat_json_and_stream_validate(gw: Gateway) -> None:
    client = gw.client()
    raw = client.chat.completions.with_raw_response.create(model="claude", messages=HELLO, max_tokens=50)
    validate("CreateChatCompletionResponse", raw.http_response.json())
    answer = raw.parse()
    assert answer.choices[0].message.content == "Hello from the stand-in: 1 turns, 0 images, done."
    assert answer.choices[0].finish_reason == "stop" and answer.usage is not None
    body = {
        "model": "claude",
        "messages": HELLO,
        "max_tokens": 50,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    chunks = []
    with httpx.stream(
        "POST", f"{gw.url}/v1/chat/completions", json=body, headers=gw.auth, timeout=30
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
                validate("CreateChatCompletionStreamResponse", chunks[-1])
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == answer.choices[0].message.content
    assert chunks[-1]["usage"]["completion_tokens"] > 0  # usage in the last chunk


def test_chat_tools_and_structured_output(gw: Gateway, claude: AnthropicStandIn) -> None:
    client = gw.client()
    tool: Any = {"type": "function", "function": {"name": "weather", "parameters": WEATHER_SCHEMA}}
    raw = client.chat.completions.with_raw_response.create(
        model="claude", messages=HELLO, tools=[tool], tool_choice="required", parallel_tool_calls=False
    )
    validate("CreateChatCompletionResponse", raw.http_response.json())
    choice = raw.parse().choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert claude.requests[-1]["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    raw = client.chat.completions.with_raw_response.create(
        model="claude", messages=HELLO, response_format=fmt
    )
    validate("CreateChatCompletionResponse", raw.http_response.json())
    assert json.loads(raw.parse().choices[0].message.content or "") == {"name": "Paris", "age": 7}
    assert claude.requests[-1]["output_config"] == {"format": {"type": "json_schema", "schema": schema}}


def test_what_anthropic_cannot_do_is_refused_when_pinned(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gw.client().chat.completions.create(model="claude", messages=HELLO, logprobs=True)
    assert "logprobs" in caught.value.message


def test_responses(gw: Gateway) -> None:
    raw = gw.client().responses.with_raw_response.create(
        model="claude", input="Say hello.", max_output_tokens=50
    )
    validate("Response", raw.http_response.json())
    assert raw.parse().output_text == "Hello from the stand-in: 1 turns, 0 images, done."


def test_responses_stream_and_legacy_completions(gw: Gateway, claude: AnthropicStandIn) -> None:
    body = {"model": "claude", "input": "Say hello.", "stream": True, "max_output_tokens": 50}
    events: list[dict[str, Any]] = []
    with httpx.stream("POST", f"{gw.url}/v1/responses", json=body, headers=gw.auth, timeout=30) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                validate("ResponseStreamEvent", events[-1])
    assert events[-1]["type"] == "response.completed"
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Hello from the stand-in: 1 turns, 0 images, done."
    raw = gw.client().completions.with_raw_response.create(
        model="claude", prompt="Once upon a time", max_tokens=4
    )
    validate("CreateCompletionResponse", raw.http_response.json())
    choice = raw.parse().choices[0]
    assert (choice.text, choice.finish_reason) == ("Hello from the stand-in:", "length")
    assert claude.requests[-1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Once upon a time"}]}
    ]


# -- faults ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "said"),
    [("429", "429"), ("529", "529"), ("500", "500"), ("stall", "did not answer in time")],
)
def test_a_fault_before_the_first_byte_moves_to_the_next_tier(
    gw: Gateway, claude: AnthropicStandIn, fault: str, said: str
) -> None:
    claude.stall_s = 3.0
    claude.fail(fault)
    raw = gw.client().chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=HELLO, max_tokens=50
    )
    assert raw.headers["x-tiergate-tier"] == "backup"
    reason = raw.headers["x-tiergate-route-reason"]
    assert "claude" in reason and said in reason, reason
    assert raw.parse().choices[0].message.content == "Hello from the backup: 1 turns, 0 images, done."


def test_an_error_event_mid_stream_ends_with_an_error_and_bills_what_came(
    gw: Gateway, claude: AnthropicStandIn
) -> None:
    claude.fail("midstream")
    rid = f"mid-{uuid.uuid4().hex[:8]}"
    stream = gw.client().chat.completions.create(
        model="tiergate-auto", messages=HELLO, max_tokens=50, stream=True, extra_headers={"X-Request-ID": rid}
    )
    got: list[str] = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in stream:
            got.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(got) == "Hello from " and "overloaded_error" in caught.value.message
    row = ledger_rows(gw, want={rid})[rid]
    assert row.tier == "claude" and row.completion_tokens > 0, row
    # /v1/messages: the error as Anthropic's own error event
    claude.fail("midstream")
    request = {"model": "claude", "max_tokens": 50, "messages": HELLO, "stream": True}
    headers = {"x-api-key": gw.api_key, "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", f"{gw.url}/v1/messages", json=request, headers=headers, timeout=30) as resp:
        events = [line[7:] for line in resp.iter_lines() if line.startswith("event: ")]
    assert events[0] == "message_start" and events[-1] == "error"


def test_a_400_is_the_clients_and_the_tier_stays_healthy(gw: Gateway, claude: AnthropicStandIn) -> None:
    claude.fail("400")
    with pytest.raises(openai.BadRequestError) as caught:
        gw.client().chat.completions.create(model="claude", messages=HELLO)
    assert caught.value.code == "context_length_exceeded" and "prompt is too long" in caught.value.message
    claude.fail("400")
    with pytest.raises(anthropic.BadRequestError) as refused:
        gw.anthropic().messages.create(model="claude", max_tokens=10, messages=HELLO)  # type: ignore[arg-type]
    assert refused.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert gw.tier_health("claude") == "ready"


def test_a_refused_key_takes_the_tier_down_and_is_not_retried(gw: Gateway, claude: AnthropicStandIn) -> None:
    claude.fail("401", times=5)
    before = len(claude.requests)
    raw = gw.client().chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=HELLO, max_tokens=50
    )
    assert raw.headers["x-tiergate-tier"] == "backup"
    assert len(claude.requests) == before + 1  # asked once, not retried
    ready = gw.readyz()
    tier = next(t for t in ready["tiers"] if t["name"] == "claude")
    assert tier["health"] == "down" and "refused the key" in tier["detail"], tier
    breaker = next(b for b in ready["breakers"] if b["tier"] == "claude" and b["modality"] == "text")
    assert breaker["state"] == "open" and "refused the key" in breaker["last_failure"], breaker
    claude.fail("", 0)


# -- cost --------------------------------------------------------------------------------------------


def test_cache_reads_and_writes_are_billed_at_their_prices(gw: Gateway, claude: AnthropicStandIn) -> None:
    system = "You answer questions about the weather, politely and briefly. " * 40
    rids = [f"cache-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for rid in rids:  # cache_prefix = true: a breakpoint on the system prompt; written, then read
        gw.anthropic().messages.create(
            model="claude",
            max_tokens=50,
            system=system,
            messages=HELLO,
            extra_headers={"X-Request-ID": rid},  # type: ignore[arg-type]
        )
    assert claude.requests[-1]["system"][-1]["cache_control"] == {"type": "ephemeral"}
    written, read = claude.usages[-2:]
    rows = ledger_rows(gw, want=set(rids))
    for rid, usage in zip(rids, (written, read), strict=True):
        row = rows[rid]
        cached, creation = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
        assert (row.prompt_tokens, row.cached_tokens, row.cache_write_tokens, row.completion_tokens) == (
            usage["input_tokens"] + cached + creation,
            cached,
            creation,
            usage["output_tokens"],
        )
        usd = (
            usage["input_tokens"] * PRICES["prompt"]
            + cached * PRICES["read"]
            + creation * PRICES["write"]
            + usage["output_tokens"] * PRICES["completion"]
        ) / 1000
        assert row.cost_nusd == round(usd * 1e9), (row, usage)
    assert written["cache_creation_input_tokens"] > 0 and read["cache_read_input_tokens"] > 0


def test_a_clients_cache_control_reaches_anthropic_and_its_usage_comes_back(
    gw: Gateway, backup: AnthropicStandIn
) -> None:
    system: Any = [
        {"type": "text", "text": "Rules of the house. " * 60, "cache_control": {"type": "ephemeral"}}
    ]
    client = gw.anthropic()
    first, second = (
        client.messages.create(model="backup", max_tokens=50, system=system, messages=HELLO)  # type: ignore[arg-type]
        for _ in range(2)
    )
    assert backup.requests[-1]["system"] == [
        {"type": "text", "text": system[0]["text"], "cache_control": {"type": "ephemeral"}}
    ]
    written, read = backup.usages[-2:]
    assert (first.usage.input_tokens, first.usage.cache_creation_input_tokens) == (
        written["input_tokens"],
        written["cache_creation_input_tokens"],
    )
    assert (second.usage.input_tokens, second.usage.cache_read_input_tokens) == (
        read["input_tokens"],
        read["cache_read_input_tokens"],
    )
    assert first.usage.cache_creation_input_tokens and second.usage.cache_read_input_tokens
