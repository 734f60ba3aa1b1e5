"""vLLM's answers read as the tier's events: a streamed body however its bytes are cut, an answer
without text, a JSON body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import msgspec
import pytest

from tiers import (
    ChoiceDone,
    Event,
    Finished,
    Generation,
    Logprobs,
    Started,
    TextDelta,
    TierFailed,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
)
from tiers.cloud._checks import OutputCheck
from tiers.cloud._wire import body_events, request_body, stream_events

PLAIN = OutputCheck(Generation(messages=[]), "cloud")
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _chunk(content: str | None, finish: str | None = None, **extra: object) -> bytes:
    delta = {} if content is None else {"content": content}
    body = {"model": "smol", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = b'data: {"model": "smol", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}}\n\n'
BODY = (
    _chunk(None)
    + _chunk("")
    + _chunk("Hel")
    + _chunk("lo")
    + _chunk(None, "length")
    + USAGE
    + b"data: [DONE]\n\n"
)


async def _cut(body: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(body), size):
        yield body[at : at + size]


async def _events(source: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in source]


@pytest.mark.parametrize("size", [1, 7, 64, len(BODY)])
async def test_a_streamed_answer_cut_anywhere_gives_the_same_events(size: int) -> None:
    events = await _events(stream_events(_cut(BODY, size), "cloud-0", "configured", PLAIN))
    assert events == [
        Started("cloud-0", "smol"),  # the model the chunks name
        TextDelta("Hel"),
        TextDelta("lo"),
        Finished("length", Usage(9, 2)),
    ]


async def test_an_answer_without_text_still_starts_and_finishes() -> None:
    body = _chunk(None, "stop") + b"data: [DONE]"  # and no newline after the last line
    events = await _events(stream_events(_cut(body, 5), "cloud-1", "configured", PLAIN))
    assert events == [Started("cloud-1", "smol"), Finished("stop", Usage(0, 0))]


async def test_a_chunk_that_is_not_json_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        await _events(stream_events(_cut(b"data: {not json\n\n", 64), "cloud-0", "m", PLAIN))


async def test_a_json_body_is_one_piece_of_text_between_start_and_finish() -> None:
    body = json.dumps(
        {
            "model": "smol",
            "choices": [{"message": {"content": "Hello there"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2},
        }
    ).encode()
    events = body_events(body, "cloud-0", "configured", PLAIN)
    assert events == (Started("cloud-0", "smol"), TextDelta("Hello there"), Finished("stop", Usage(4, 2)))
    empty = b'{"choices": [{"message": {"content": null}}]}'
    assert body_events(empty, "cloud-0", "configured", PLAIN) == (
        Started("cloud-0", "configured"),
        Finished("stop", Usage(0, 0)),
    )


def _tools(*, schema: dict[str, object] | None = None, n: int = 1) -> OutputCheck:
    fmt = None if schema is None else {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}
    return OutputCheck(Generation(messages=[], tools=[WEATHER], response_format=fmt, n=n), "cloud")


def _tool_chunk(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> bytes:
    call: dict[str, object] = {"index": index, "function": {"arguments": args}}
    if id:
        call["id"], call["type"] = id, "function"
        call["function"] = {"name": name, "arguments": args}
    body = {
        "model": "smol",
        "choices": [{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def test_streamed_tool_calls_keep_their_order_get_openai_ids_and_finish_as_tool_calls() -> None:
    body = (
        _tool_chunk(0, id="chatcmpl-tool-abc", name="get_weather")
        + _tool_chunk(0, args='{"city": ')
        + _tool_chunk(0, args='"Paris"}')
        + _chunk(None, "stop")  # vLLM says stop for a named tool_choice
        + b"data: [DONE]\n\n"
    )
    events = await _events(stream_events(_cut(body, 13), "cloud-0", "m", _tools()))
    assert events == [
        Started("cloud-0", "smol"),
        ToolCallDelta(0, "call_abc", "get_weather", ""),
        ToolCallDelta(0, arguments='{"city": '),
        ToolCallDelta(0, arguments='"Paris"}'),
        Finished("tool_calls", Usage(0, 0)),
    ]


@pytest.mark.parametrize(
    ("name", "args", "why"),
    [
        ("get_weather", '{"city": ', "not valid JSON"),
        ("get_weather", '{"town": "Paris"}', "parameters schema"),
        ("launch_rockets", "{}", "not among the request's tools"),
    ],
)
async def test_a_tool_call_that_breaks_the_request_is_refused_not_passed_on(
    name: str, args: str, why: str
) -> None:
    body = (
        _tool_chunk(0, id="chatcmpl-tool-1", name=name, args=args)
        + _chunk(None, "tool_calls")
        + b"data: [DONE]"
    )
    with pytest.raises(TierFailed, match=why):
        await _events(stream_events(_cut(body, 64), "cloud-0", "m", _tools()))
    message = {"content": None, "tool_calls": [{"id": "x", "function": {"name": name, "arguments": args}}]}
    whole = {"choices": [{"message": message, "finish_reason": "tool_calls"}]}
    with pytest.raises(TierFailed, match=why):
        body_events(json.dumps(whole).encode(), "cloud-0", "m", _tools())


def test_content_against_the_response_format_schema_unless_cut_short() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    def answer(content: str, finish: str) -> bytes:
        return json.dumps({"choices": [{"message": {"content": content}, "finish_reason": finish}]}).encode()

    assert body_events(answer('{"n": 3}', "stop"), "c", "m", _tools(schema=schema))[1] == TextDelta(
        '{"n": 3}'
    )
    with pytest.raises(TierFailed, match="response_format schema"):
        body_events(answer('{"n": "three"}', "stop"), "c", "m", _tools(schema=schema))
    body_events(answer('{"n": ', "length"), "c", "m", _tools(schema=schema))  # cut by max_tokens: as it is


def test_n_choices_logprobs_and_cached_tokens_from_a_json_body() -> None:
    top = [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}]
    scored = {"content": [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": top}]}
    body = json.dumps(
        {
            "model": "smol",
            "choices": [
                {"index": 0, "message": {"content": "Hi"}, "finish_reason": "stop", "logprobs": scored},
                {"index": 1, "message": {"content": "Yo"}, "finish_reason": "length"},
            ],
            "usage": {
                "prompt_tokens": 9,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        }
    ).encode()
    events = body_events(body, "c", "m", OutputCheck(Generation(messages=[], n=2), "cloud"))
    assert events == (
        Started("c", "smol"),
        Logprobs([TokenLogprob("Hi", -0.1, [72, 105], [TopLogprob("Hi", -0.1, [72, 105])])]),
        TextDelta("Hi"),
        TextDelta("Yo", 1),
        ChoiceDone(1, "length"),
        Finished("stop", Usage(9, 4, 8)),
    )


def test_an_answer_without_choices_is_a_failure() -> None:
    with pytest.raises(TierFailed, match="without any choice"):
        body_events(b'{"choices": []}', "cloud-0", "m", PLAIN)


def test_greedy_n_choices_are_asked_once_and_copied() -> None:
    """vLLM refuses n > 1 at temperature 0 (OpenAI does not); every greedy choice is the same answer."""
    gen = Generation(messages=[], n=3, temperature=0, tools=[WEATHER], tool_choice="required")
    assert "n" not in json.loads(request_body(gen, "m"))
    sampled = Generation(messages=[], n=3, temperature=0.7)
    assert json.loads(request_body(sampled, "m"))["n"] == 3
    message = {
        "tool_calls": [
            {"id": "chatcmpl-tool-7", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
        ]
    }
    body = json.dumps({"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}).encode()
    events = body_events(body, "c", "m", OutputCheck(gen, "cloud"))
    calls = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [(c.choice, c.id) for c in calls] == [(0, "call_7"), (1, "call_71"), (2, "call_72")]
    assert [e for e in events if isinstance(e, ChoiceDone)] == [
        ChoiceDone(1, "tool_calls"),
        ChoiceDone(2, "tool_calls"),
    ]


async def test_an_error_event_mid_stream_fails_the_answer_instead_of_ending_it() -> None:
    """vLLM reports an engine failure after the first bytes as a data event with an error; it must not
    read as an answer that stopped (billed, cached)."""
    body = _chunk("Hel") + b'data: {"error": {"message": "engine died", "type": "InternalServerError"}}\n\n'
    with pytest.raises(TierFailed, match="failed mid-answer: engine died"):
        await _events(stream_events(_cut(body, 16), "cloud-0", "m", PLAIN))
