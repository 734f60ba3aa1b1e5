"""The shared Anthropic translators (tiers/cloud/provider/anthropic): a Generation as the Messages API
body (checked against the anthropic SDK's own parameter types), Anthropic's answers as tier events,
the tables both ways, and the dialect's reading of errors and rate-limit headers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.standins.anthropic_provider import check_body
from tiers import (
    Ability,
    Finished,
    Generation,
    KeyRefused,
    TextDelta,
    TierOverloaded,
    TierRejected,
    TierUnavailable,
    ToolCallDelta,
    Usage,
)
from tiers.cloud.provider import ProviderConfig
from tiers.cloud.provider.anthropic import (
    FINISH_REASONS,
    STOP_REASONS,
    AnthropicDialect,
    StreamError,
    StreamReader,
    anthropic_tool_choice,
    events_of_message,
    neutral_tool_choice,
    params_of,
    stop_reason,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "Weather here and there?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        ],
    },
    {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "call_a", "content": "snow"},
    {"role": "tool", "tool_call_id": "call_b", "content": "sun"},
    {"role": "developer", "content": "Answer in one line."},
    {"role": "user", "content": "So?"},
]


def _body(**fields: Any) -> dict[str, Any]:
    gen = Generation(messages=fields.pop("messages", CONVERSATION), **fields)
    body = params_of(gen, "claude-test", default_max_tokens=321)
    assert check_body(body) == "", check_body(body)  # what Anthropic's own types accept
    return body


def test_a_conversation_becomes_alternating_turns_with_blocks() -> None:
    body = _body(tools=[WEATHER], stop=["END"], temperature=1.7, top_p=0.9, top_k=40)
    assert body["system"] == [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": "Answer in one line."},
    ]
    user, assistant, results = body["messages"]
    assert [b["type"] for b in user["content"]] == ["text", "image", "image"]
    assert user["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo=",
    }
    assert user["content"][2]["source"] == {"type": "url", "url": "https://example.com/cat.jpg"}
    assert assistant["content"] == [
        {"type": "text", "text": "Looking."},
        {"type": "tool_use", "id": "call_a", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "call_b", "name": "weather", "input": {"city": "Rome"}},
    ]
    # both results and the next question: one user turn, the results first
    assert results["role"] == "user"
    assert results["content"] == [
        {"type": "tool_result", "tool_use_id": "call_a", "content": "snow"},
        {"type": "tool_result", "tool_use_id": "call_b", "content": "sun"},
        {"type": "text", "text": "So?"},
    ]
    assert body["tools"] == [
        {
            "name": "weather",
            "input_schema": WEATHER["function"]["parameters"],
            "description": "The weather in a city",
        }
    ]
    assert body["tool_choice"] == {"type": "auto"}
    assert body["stop_sequences"] == ["END"]
    assert (body["temperature"], body["top_p"], body["top_k"]) == (1.0, 0.9, 40)  # Anthropic's range: 0..1
    assert body["max_tokens"] == 321 and "stream" not in body


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ({"type": "function", "function": {"name": "weather"}}, None, {"type": "tool", "name": "weather"}),
        ("none", False, {"type": "none"}),
    ],
)
def test_tool_choice_both_ways(choice: Any, parallel: bool | None, expected: dict[str, Any]) -> None:
    body = _body(tools=[WEATHER], tool_choice=choice, parallel_tool_calls=parallel)
    assert body["tool_choice"] == expected == anthropic_tool_choice(choice, parallel)
    assert neutral_tool_choice(expected) == (
        choice,
        False if parallel is False and choice != "none" else None,
    )


def test_structured_output_effort_and_stream() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema, "strict": True}}
    body = _body(response_format=fmt, reasoning_effort="minimal", max_tokens=5, stream=True)
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}, "effort": "low"}
    assert body["max_tokens"] == 5 and body["stream"] is True


def test_cache_control_passes_and_the_prefix_option_marks_one() -> None:
    marked = [
        {
            "role": "system",
            "content": [{"type": "text", "text": "Long rules", "cache_control": {"type": "ephemeral"}}],
        },
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        },
    ]
    gen = Generation(messages=marked, tools=[{**WEATHER, "cache_control": {"type": "ephemeral"}}])
    body = params_of(gen, "m", default_max_tokens=10, cache_prefix=True)
    assert check_body(body) == ""
    assert body["system"] == [{"type": "text", "text": "Long rules", "cache_control": {"type": "ephemeral"}}]
    assert body["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert body["tools"][0]["cache_control"] == {"type": "ephemeral"}  # the client's: no more added
    plain = Generation(
        messages=[{"role": "system", "content": "Rules"}, {"role": "user", "content": "hi"}], tools=[WEATHER]
    )
    body = params_of(plain, "m", default_max_tokens=10, cache_prefix=True)
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in body["tools"][0]
    assert "cache_control" not in json.dumps(params_of(plain, "m", default_max_tokens=10))


def test_stop_reasons_both_ways() -> None:
    for neutral, anthropic_reason in STOP_REASONS.items():
        assert FINISH_REASONS[anthropic_reason] == neutral
    assert stop_reason("stop", "END") == ("stop_sequence", "END")
    assert stop_reason("stop") == ("end_turn", None)
    assert FINISH_REASONS["stop_sequence"] == "stop"


def test_a_message_as_events_with_cache_usage() -> None:
    message = {
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "s"},
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20,
        },
    }
    assert events_of_message(message) == [
        TextDelta("Calling."),
        ToolCallDelta(0, "toolu_1", "weather", '{"city":"Oslo"}'),
        Finished("tool_calls", Usage(130, 5, cached_tokens=100, cache_write_tokens=20)),
    ]


def test_a_stream_as_events() -> None:
    reader = StreamReader()
    events: list[Any] = []
    for data in [
        {
            "type": "message_start",
            "message": {
                "model": "m",
                "usage": {"input_tokens": 7, "output_tokens": 1, "cache_read_input_tokens": 3},
            },
        },
        {"type": "ping"},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi "}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a"'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ": 1}"},
        },
        {
            "type": "message_delta",
            "delta": {"stop_reason": "stop_sequence", "stop_sequence": "##"},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]:
        events.extend(reader.read(data))
    assert events == [
        TextDelta("Hi "),
        ToolCallDelta(0, "toolu_9", "f"),
        ToolCallDelta(0, arguments='{"a"'),
        ToolCallDelta(0, arguments=": 1}"),
        Finished("stop", Usage(10, 9, cached_tokens=3), "##"),
    ]
    with pytest.raises(StreamError, match="overloaded_error"):
        reader.read({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})


def _dialect(**fields: Any) -> AnthropicDialect:
    config = ProviderConfig(
        protocol="anthropic", base_url="https://api.anthropic.com", model="claude-x", **fields
    )
    return AnthropicDialect("claude", config, "sk-secret")


def test_the_call_and_what_anthropic_cannot_do() -> None:
    dialect = _dialect()
    out = dialect.request(Generation(messages=[{"role": "user", "content": "hi"}]))
    assert out.url == "https://api.anthropic.com/v1/messages"
    assert out.headers["x-api-key"] == "sk-secret" and out.headers["anthropic-version"] == "2023-06-01"
    assert json.loads(out.body)["max_tokens"] == 4096  # the tier's max_output_tokens
    assert not {Ability.LOGPROBS, Ability.CHOICES, Ability.LOGIT_BIAS} & dialect.abilities
    assert {Ability.TOOLS, Ability.JSON_SCHEMA} <= dialect.abilities
    hi = [{"role": "user", "content": "hi"}]
    with pytest.raises(TierRejected, match="presence_penalty"):
        dialect.request(Generation(messages=hi, presence_penalty=0.5))
    sent = json.loads(dialect.request(Generation(messages=hi, seed=1, frequency_penalty=0.0)).body)
    assert "seed" not in sent and "frequency_penalty" not in sent  # best effort / neutral: not sent


def test_errors_are_read_as_the_tier_needs() -> None:
    dialect = _dialect()

    def body(kind: str, message: str) -> bytes:
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()

    limited = dialect.failure(429, {"retry-after": "7"}, body("rate_limit_error", "slow down"))
    assert isinstance(limited, TierOverloaded) and limited.retry_after_s == 7
    assert type(dialect.failure(529, {}, body("overloaded_error", "Overloaded"))) is TierUnavailable
    assert type(dialect.failure(500, {}, body("api_error", "boom"))) is TierUnavailable
    refused = dialect.failure(401, {}, body("authentication_error", "invalid x-api-key"))
    assert isinstance(refused, KeyRefused) and "401 authentication_error" in refused.message
    too_long = dialect.failure(400, {}, body("invalid_request_error", "prompt is too long: 250000 tokens"))
    assert isinstance(too_long, TierRejected) and too_long.code == "context_length_exceeded"
    bad = dialect.failure(400, {}, body("invalid_request_error", "messages.0: bad"))
    assert isinstance(bad, TierRejected) and "messages.0: bad" in bad.message


def test_headroom_from_anthropic_headers() -> None:
    room = _dialect().headroom(
        {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-tokens-remaining": "5000",
            "anthropic-ratelimit-requests-reset": "2999-01-01T00:00:00Z",
        }
    )
    assert room is not None and (room.requests, room.tokens) == (0, 5000) and room.exhausted()
    assert room.reset_s is not None and room.reset_s > 0
    assert _dialect().headroom({}) is None
