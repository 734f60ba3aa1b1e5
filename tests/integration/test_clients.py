"""Clients people build on tiergate, unmodified: the official ``openai`` client, LangChain's ``ChatOpenAI``
and the openai-agents SDK, against real tiers (the llama.cpp edge; the local vLLM server for ``cloud``).

What is asserted is OpenAI's behaviour, not tiergate's internals: tool calls (named, required and auto
choice, streamed and reassembled, a tool result sent back), structured output (``parse()`` with a
pydantic model, ``json_object``), logprobs, ``n``, ``models.retrieve`` and OpenAI's error codes. Every
answer and stream chunk is also checked against OpenAI's OpenAPI document (tests/openai_schema.py).
A tiny model's words may be silly; the structure must be right every time.

The tests share the suite's gateway; the ``cloud`` variants are marked ``cloud``, so they run last, on
the same local vLLM server as the other cloud tests. ``-m "not cloud"`` runs the edge alone.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import jsonschema
import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from pydantic import BaseModel

from tests.agent_turn import weather_turn
from tests.conftest import AUTO, EDGE, EVERY_TIER, FRESH, Gateway
from tests.openai_schema import CHAT_COMPLETION, CHAT_COMPLETION_CHUNK, MODEL, validate

# Every answer from the tier itself, not a cache replay.

# Tier-level features: each tier, and auto's choice. The cloud runs are few (vLLM's CPU time is scarce).
EDGE_TIERS = pytest.mark.parametrize("model", [EDGE, AUTO])

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "An IANA zone, e.g. Europe/Paris"}},
            "required": ["timezone"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [WEATHER, TIME]
ASK_WEATHER: list[Any] = [{"role": "user", "content": "What is the weather in Paris right now?"}]
HELLO: list[Any] = [{"role": "user", "content": "Say hello in one short sentence."}]
# Room for a call in the chat template's format (``<tool_call>{"name": …, "arguments": …}``) and its end.
CALL_TOKENS = 96


class Weather(BaseModel):
    city: str
    unit: Literal["celsius", "fahrenheit"]
    temperature: int


@pytest.fixture
def gw(tier_gw: Gateway) -> Gateway:
    return tier_gw


@pytest.fixture
def client(gw: Gateway) -> openai.OpenAI:
    return gw.client(default_headers=FRESH, timeout=120)


# Each test checks its feature first, then the answer against OpenAI's schema (a failure then says
# which of the two is missing).


def create(client: openai.OpenAI, model: str, **params: Any) -> Any:
    """``chat.completions.create`` at temperature 0."""
    return client.chat.completions.create(model=model, **{"temperature": 0, "max_tokens": 48, **params})


def stream(client: openai.OpenAI, model: str, **params: Any) -> list[Any]:
    """A streamed answer's chunks (usage included)."""
    params = {"temperature": 0, "max_tokens": 48, "stream_options": {"include_usage": True}, **params}
    return list(client.chat.completions.create(model=model, stream=True, **params))


def validate_chunks(chunks: list[Any]) -> None:
    for i, chunk in enumerate(chunks):
        try:
            validate(CHAT_COMPLETION_CHUNK, chunk)
        except AssertionError as exc:
            raise AssertionError(f"chunk {i} of {len(chunks)}: {exc}") from None


def tool_named(name: str) -> dict[str, Any]:
    return next(t for t in TOOLS if t["function"]["name"] == name)


def assert_a_valid_call(call: Any, tools: list[dict[str, Any]]) -> Any:
    """One function call as OpenAI makes it: an id ``call_…``, a tool that was offered, and arguments
    that are JSON valid for that tool's parameters. Returns the decoded arguments."""
    assert call.type == "function"
    assert call.id.startswith("call_"), call.id
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.function.name in offered, call.function.name
    arguments = json.loads(call.function.arguments)
    jsonschema.Draft202012Validator(offered[call.function.name]).validate(arguments)
    return arguments


# -- tool calls ------------------------------------------------------------------------------------


@EVERY_TIER
def test_a_named_tool_choice_calls_that_tool(client: openai.OpenAI, model: str) -> None:
    # asked about the weather, told to call get_time: the choice wins over what the prompt suggests
    choice = {"type": "function", "function": {"name": "get_time"}}
    completion = create(
        client, model, messages=ASK_WEATHER, tools=TOOLS, tool_choice=choice, max_tokens=CALL_TOKENS
    )
    answer = completion.choices[0]
    calls = answer.message.tool_calls
    assert calls, answer.message
    # OpenAI itself ends a *named* forced call with "stop" (and a required one with "tool_calls"; see
    # vllm-project/vllm#25054, which measured it); issue #20 asks for "tool_calls". Either is OpenAI's.
    assert answer.finish_reason in ("tool_calls", "stop"), answer
    assert [c.function.name for c in calls] == ["get_time"]
    assert_a_valid_call(calls[0], TOOLS)
    validate(CHAT_COMPLETION, completion)


@EVERY_TIER
def test_required_tool_choice_makes_a_call(client: openai.OpenAI, model: str) -> None:
    completion = create(
        client, model, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required", max_tokens=CALL_TOKENS
    )
    answer = completion.choices[0]
    assert answer.message.tool_calls, answer.message
    assert answer.finish_reason == "tool_calls", answer
    assert answer.message.role == "assistant"
    for call in answer.message.tool_calls:
        assert_a_valid_call(call, TOOLS)
    validate(CHAT_COMPLETION, completion)


@EDGE_TIERS
def test_auto_tool_choice_answers_in_text_or_with_a_valid_call(client: openai.OpenAI, model: str) -> None:
    completion = create(
        client, model, messages=ASK_WEATHER, tools=[WEATHER], tool_choice="auto", max_tokens=CALL_TOKENS
    )
    answer = completion.choices[0]
    if answer.message.tool_calls:
        assert answer.finish_reason == "tool_calls", answer
        for call in answer.message.tool_calls:
            assert_a_valid_call(call, [WEATHER])
    else:
        assert (answer.message.content or "").strip(), answer.message
        assert answer.finish_reason in ("stop", "length")
    validate(CHAT_COMPLETION, completion)


@EVERY_TIER
def test_streamed_tool_calls_reassemble(client: openai.OpenAI, model: str) -> None:
    """OpenAI's stream of a call: its first delta has the index, the id, the type and the name (and
    perhaps the start of the arguments); the later ones have only the index and more arguments, which
    concatenate to the whole JSON. (The client's own accumulator would double a repeated id or name.)"""
    calls: dict[int, dict[str, str]] = {}
    finish, usage = [], None
    state = ChatCompletionStreamState()
    chunks = stream(
        client, model, messages=ASK_WEATHER, tools=TOOLS, tool_choice="required", max_tokens=CALL_TOKENS
    )
    assert chunks[0].choices and chunks[0].choices[0].delta.role == "assistant"
    for chunk in chunks:
        state.handle_chunk(chunk)
        usage = chunk.usage or usage
        for choice in chunk.choices:
            finish += [choice.finish_reason] if choice.finish_reason else []
            for delta in choice.delta.tool_calls or []:
                if delta.index not in calls:
                    assert delta.id and delta.id.startswith("call_"), delta
                    assert delta.type == "function" and delta.function and delta.function.name, delta
                    calls[delta.index] = {"id": delta.id, "name": delta.function.name, "arguments": ""}
                else:
                    assert delta.id is None and (delta.function is None or delta.function.name is None), delta
                calls[delta.index]["arguments"] += (delta.function and delta.function.arguments) or ""
    assert calls, "no delta.tool_calls in the stream"
    assert finish == ["tool_calls"]
    assert sorted(calls) == list(range(len(calls)))  # indexes 0, 1, … in order of appearance
    for call in calls.values():
        assert call["name"] in ("get_weather", "get_time")
        jsonschema.validate(json.loads(call["arguments"]), tool_named(call["name"])["function"]["parameters"])
    assert usage is not None and usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1
    # the openai client's own reassembly agrees
    final = state.get_final_completion().choices[0].message.tool_calls or []
    assert [(c.id, c.function.name, c.function.arguments) for c in final] == [
        (c["id"], c["name"], c["arguments"]) for c in calls.values()
    ]
    validate_chunks(chunks)


@EVERY_TIER
def test_a_tool_result_round_trip_ends_in_text(client: openai.OpenAI, model: str) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    first = create(
        client, model, messages=ASK_WEATHER, tools=TOOLS, tool_choice=choice, max_tokens=CALL_TOKENS
    )
    assert first.choices[0].message.tool_calls, first.choices[0]
    call = first.choices[0].message.tool_calls[0]
    assert_a_valid_call(call, TOOLS)
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "sunny", "celsius": 21})}
    messages = [*ASK_WEATHER, assistant, result]
    second = create(client, model, messages=messages, tools=TOOLS, tool_choice="none")
    answer = second.choices[0]
    assert not answer.message.tool_calls  # "none": text, never a call
    assert (answer.message.content or "").strip(), answer.message
    assert answer.finish_reason in ("stop", "length")
    # the tool exchange is in the prompt the model read
    assert second.usage is not None and first.usage is not None
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    validate(CHAT_COMPLETION, first)
    validate(CHAT_COMPLETION, second)


# -- structured output -----------------------------------------------------------------------------


@EVERY_TIER
def test_parse_with_a_pydantic_model(client: openai.OpenAI, model: str) -> None:
    raw = client.chat.completions.with_raw_response.parse(
        model=model,
        messages=[{"role": "user", "content": "Report the weather in Paris: city, unit and temperature."}],
        response_format=Weather,
        temperature=0,
        max_tokens=64,
    )
    completion = raw.parse()
    message = completion.choices[0].message
    assert isinstance(message.parsed, Weather), message
    assert Weather.model_validate_json(message.content or "") == message.parsed
    assert completion.choices[0].finish_reason == "stop"
    # what came over the wire: parse() adds fields of its own (parsed, tool_calls=None) to the message
    validate(CHAT_COMPLETION, raw.http_response.json())


@EDGE_TIERS
def test_json_object_gives_a_json_object(client: openai.OpenAI, model: str) -> None:
    prompt = "Describe Paris as a JSON object with the keys name and country."  # OpenAI wants "JSON" said
    completion = create(
        client,
        model,
        messages=[{"role": "user", "content": prompt}],
        response_format={"type": "json_object"},
        max_tokens=80,
    )
    answer = completion.choices[0]
    assert answer.finish_reason == "stop", answer  # cut at max_tokens, JSON would be incomplete
    assert isinstance(json.loads(answer.message.content or ""), dict)
    validate(CHAT_COMPLETION, completion)


# -- logprobs and n ---------------------------------------------------------------------------------


@EVERY_TIER
def test_logprobs_with_two_top_logprobs(client: openai.OpenAI, model: str) -> None:
    completion = create(client, model, messages=HELLO, logprobs=True, top_logprobs=2, max_tokens=12)
    answer = completion.choices[0]
    assert answer.logprobs is not None and answer.logprobs.content, answer
    entries = answer.logprobs.content
    assert completion.usage is not None and len(entries) == completion.usage.completion_tokens
    for entry in entries:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 2, entry
        best, second = entry.top_logprobs
        assert best.logprob >= second.logprob
        assert entry.token == best.token  # temperature 0: the likeliest token is the one written
    if all(e.bytes is not None for e in entries):  # the tokens' bytes spell the answer
        assert bytes(b for e in entries for b in e.bytes or []).decode() == answer.message.content
    validate(CHAT_COMPLETION, completion)


@EVERY_TIER
def test_n_gives_that_many_sampled_choices(client: openai.OpenAI, model: str) -> None:
    check_n_choices(create(client, model, messages=HELLO, n=2, max_tokens=12, temperature=1.0, seed=7))


@EDGE_TIERS
def test_n_at_temperature_0_gives_that_many_choices(client: openai.OpenAI, model: str) -> None:
    # OpenAI accepts n > 1 with greedy decoding (the choices may be alike); vLLM refuses it ("n must
    # be 1 when using greedy sampling"), so the cloud is not asked here
    check_n_choices(create(client, model, messages=HELLO, n=2, max_tokens=12))


def check_n_choices(completion: Any) -> None:
    assert [c.index for c in completion.choices] == [0, 1]
    for choice in completion.choices:
        assert choice.message.role == "assistant"
        assert (choice.message.content or "").strip()
        assert choice.finish_reason in ("stop", "length")
    assert completion.usage is not None and completion.usage.completion_tokens >= 2
    validate(CHAT_COMPLETION, completion)


# -- models and errors (the gateway's, one tier is enough) ------------------------------------------


@pytest.mark.parametrize("name", [AUTO, EDGE])
def test_models_retrieve(gateway: Gateway, name: str) -> None:
    found = gateway.client().models.retrieve(name)
    assert found.id == name and found.object == "model"
    assert name in [m.id for m in gateway.client().models.list()]
    validate(MODEL, found)


def test_retrieving_an_unknown_model_is_404(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.client().models.retrieve("gpt-9")
    assert caught.value.code == "model_not_found"


def test_an_unknown_field_is_a_400_naming_it(gateway: Gateway) -> None:
    # OpenAI: 400 invalid_request_error, "Unrecognized request argument supplied: frobnicate"
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client().chat.completions.create(
            model=EDGE, messages=HELLO, max_tokens=4, extra_body={"frobnicate": 1}
        )
    assert "frobnicate" in caught.value.message
    assert caught.value.type == "invalid_request_error"


def test_a_prompt_over_the_edge_context_is_context_length_exceeded(gateway: Gateway) -> None:
    long: list[Any] = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(openai.BadRequestError) as caught:
        gateway.client().chat.completions.create(model=EDGE, messages=long, max_tokens=10)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.type == "invalid_request_error"


# -- LangChain ---------------------------------------------------------------------------------------


def chat_openai(gateway: Gateway, **kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        base_url=f"{gateway.url}/v1",
        api_key=gateway.api_key,  # type: ignore[arg-type]
        model=EDGE,
        temperature=0,
        max_retries=0,
        timeout=120,
        default_headers=FRESH,
        **kwargs,
    )


def test_langchain_bind_tools_returns_tool_calls(gateway: Gateway) -> None:
    llm = chat_openai(gateway, max_tokens=CALL_TOKENS).bind_tools(TOOLS, tool_choice="get_weather")
    message = llm.invoke("What is the weather in Paris right now?")
    assert not message.invalid_tool_calls, message.invalid_tool_calls
    assert [c["name"] for c in message.tool_calls] == ["get_weather"], message
    call = message.tool_calls[0]
    assert call["id"] and call["id"].startswith("call_")
    jsonschema.validate(call["args"], WEATHER["function"]["parameters"])


def test_langchain_structured_output_with_a_json_schema(gateway: Gateway) -> None:
    llm = chat_openai(gateway, max_tokens=64).with_structured_output(Weather, method="json_schema")
    answer = llm.invoke("Report the weather in Paris: city, unit and temperature.")
    assert isinstance(answer, Weather), answer


# -- openai-agents (Chat Completions) ----------------------------------------------------------------


def test_an_agent_calls_its_function_tool_and_answers(gateway: Gateway) -> None:
    from agents import OpenAIChatCompletionsModel

    def model(client: openai.AsyncOpenAI) -> OpenAIChatCompletionsModel:
        return OpenAIChatCompletionsModel(model=EDGE, openai_client=client)

    final = weather_turn(gateway, model, CALL_TOKENS)
    assert isinstance(final, str) and final.strip()
