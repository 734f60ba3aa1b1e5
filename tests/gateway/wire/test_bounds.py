"""The bounded scan (gateway/wire/bounds.py): it agrees with msgspec on what a whole decode would
refuse and say, it refuses free-form JSON and whole bodies over their budgets, and it stops at the
bound: refusing a huge body builds next to nothing."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import msgspec
import pytest

from gateway.errors import InvalidRequest
from gateway.wire import bounds
from gateway.wire.chat import MAX_PARTS, ChatCompletionRequest, parse_chat_request
from gateway.wire.embeddings import EmbeddingRequest, parse_embedding_request
from gateway.wire.messages import parse_create
from gateway.wire.places import place_of
from gateway.wire.responses import parse_responses_request

CHAT = place_of(ChatCompletionRequest)
HELLO = [{"role": "user", "content": "hi"}]


def chat(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": HELLO, **fields}).encode()


def refusal(body: bytes, kind: Any = ChatCompletionRequest) -> str:
    """What msgspec says of ``body`` decoded whole."""
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.json.decode(body, type=kind)
    return str(caught.value)


VALID = [
    chat(),
    chat(messages=[{"role": "user", "content": [{"type": "text", "text": "a,b]}[{"}] * MAX_PARTS}]),
    chat(stop=["a", "b", "c", "d"], metadata={f"k{i}": "v" for i in range(16)}),
    chat(
        tools=[
            {
                "type": "function",
                "function": {"name": f"f{i}", "parameters": {"type": "object", "properties": {"x": {}}}},
            }
            for i in range(128)
        ]
    ),
    chat(messages=[{"role": "user", "content": 'say "[1,2]", \\ and {'}] * 4096),
    b'{"model": "m", "messages": [ {"role" : "user" , "content" : "hi" } ] , "n" : 1 }',
    b'{"\\u006dodel": "m", "messages": [{"role": "user", "content": "hi"}]}',
]


@pytest.mark.parametrize("body", VALID, ids=range(len(VALID)))
def test_what_msgspec_takes_the_scan_takes(body: bytes) -> None:
    msgspec.json.decode(body, type=ChatCompletionRequest)
    bounds.scan(body, CHAT)


OVER = [
    chat(messages=[{"role": "user", "content": "x"}] * 4097),
    chat(messages=[{"role": "user", "content": [{"type": "text", "text": ""}] * (MAX_PARTS + 1)}]),
    chat(messages=[*HELLO, {"role": "user", "content": [{"type": "text", "text": "[,"}] * 2000}]),
    chat(stop=["a", "b", "c", "d", "e"]),
    chat(metadata={f"k{i}": "v" for i in range(17)}),
    chat(logit_bias={str(i): 1 for i in range(1025)}),
    chat(tools=[{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]),
    chat(stop_token_ids=list(range(17))),
]


@pytest.mark.parametrize("body", OVER, ids=range(len(OVER)))
def test_a_list_over_its_bound_is_refused_in_msgspecs_words(body: bytes) -> None:
    with pytest.raises(msgspec.ValidationError) as caught:
        bounds.scan(body, CHAT)
    assert str(caught.value) == refusal(body)


def test_embedding_inputs_and_token_rows_are_bounded_as_openai_bounds_them() -> None:
    place = place_of(EmbeddingRequest)
    for body in (
        json.dumps({"model": "m", "input": ["a"] * 2049}).encode(),
        json.dumps({"model": "m", "input": [[1] * 2049]}).encode(),
        json.dumps({"model": "m", "input": list(range(2049))}).encode(),
    ):
        with pytest.raises(msgspec.ValidationError) as caught:
            bounds.scan(body, place)
        assert str(caught.value) == refusal(body, EmbeddingRequest)


def test_where_msgspec_stops_by_itself_the_scan_stops() -> None:
    huge = b"[" + b"[1]," * 100_000 + b"[1]]"
    for body in (
        b'{"model": "m", "unknown": ' + huge + b', "messages": []}',  # an unknown field
        b'{"model": ' + huge + b', "messages": []}',  # an array where a string goes
    ):
        bounds.scan(body, CHAT)  # no budget passed: it stopped where msgspec refuses


@pytest.mark.parametrize("where", ["tool", "format"])
def test_free_form_json_is_measured_before_it_is_built(where: str) -> None:
    schema = {"type": "object", "x": [[]] * 20_001}
    if where == "tool":
        body = chat(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])
        param = "tools[0].function.parameters"
    else:
        body = chat(response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
        param = "response_format.json_schema.schema"
    with pytest.raises(InvalidRequest) as caught:
        bounds.scan(body, CHAT)
    assert caught.value.param == param
    assert "over 20000 JSON values" in str(caught.value)


def test_a_schema_within_the_free_form_budget_passes() -> None:
    schema = {"type": "object", "x": [[]] * 19_990}
    bounds.scan(chat(tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}]), CHAT)


def test_the_whole_body_has_budgets() -> None:
    deep = chat(tools=[{"type": "function", "function": {"name": "f", "parameters": {"x": [[[[1]]]] * 10}}}])
    with pytest.raises(InvalidRequest, match="nested too deeply"):
        bounds.scan(deep, CHAT, bounds.Budget(depth=6))
    with pytest.raises(InvalidRequest, match="over 20 JSON values"):
        bounds.scan(chat(stop_token_ids=list(range(16))), CHAT, bounds.Budget(values=20))
    with pytest.raises(InvalidRequest, match="over 100 arrays and objects"):
        bounds.scan(chat(messages=HELLO * 200), CHAT, bounds.Budget(containers=100))


def test_strings_and_escapes_are_not_read_as_structure() -> None:
    tricky = ["a,b", "[", "]", "{", "}", '"', "\\", '\\",[', ":", "\u2028"]
    body = chat(stop=tricky[:4], user="],[{:,")
    bounds.scan(body, CHAT)  # four stop strings despite the commas and brackets in them
    with pytest.raises(msgspec.ValidationError):
        bounds.scan(chat(stop=tricky[:5]), CHAT)


def test_refusing_a_huge_body_builds_next_to_nothing() -> None:
    body = b'{"model": "m", "input": [' + b'"a",' * 4_000_000 + b'"a"]}'
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRequest, match="length <= 2048"):
            parse_embedding_request(body)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, peak  # bytes: the refusal built under 1 MiB for a 16 MiB body


def test_every_endpoint_refuses_at_the_bound_with_the_param() -> None:
    parts = [{"type": "text", "text": ""}] * 30_000
    with pytest.raises(InvalidRequest) as chat_error:
        parse_chat_request(chat(messages=[{"role": "user", "content": parts}]))
    assert chat_error.value.param == "messages[0].content"
    items = [{"type": "input_text", "text": ""}] * 30_000
    body = json.dumps({"model": "m", "input": [{"role": "user", "content": items}]}).encode()
    with pytest.raises(InvalidRequest) as responses_error:
        parse_responses_request(body)
    assert responses_error.value.param == "input[0].content"
    assert "length <= 512" in str(responses_error.value)
    blocks = [{"type": "text", "text": ""}] * 30_000
    body = json.dumps(
        {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": blocks}]}
    ).encode()
    with pytest.raises(InvalidRequest) as messages_error:
        parse_create(body)  # Anthropic's Messages API
    assert messages_error.value.param == "messages.0.content"  # as Anthropic writes a path
    assert "length <= 512" in str(messages_error.value)


def test_raw_items_are_scanned_on_past_what_their_type_refuses() -> None:
    # Responses items are decoded as msgspec.Raw first: an unknown field in the first item does not
    # stop msgspec, so the scan goes on and refuses the list over its bound.
    items = [{"role": "user", "content": "x", "unknown": [1]}] + [{"role": "user", "content": "x"}] * 30_000
    body = json.dumps({"model": "m", "input": items}).encode()
    with pytest.raises(InvalidRequest) as caught:
        parse_responses_request(body)
    assert caught.value.param == "input" and "length <= 2048" in str(caught.value)
