"""The token that ended a vLLM answer (its end of turn) is not part of the answer: no logprob entry and not
counted, as on the edge and in OpenAI's API (tiers/cloud/_eos.py).  The bodies are shaped as vLLM 0.32
sends them: ``stop_reason`` null at the end token, the stop string when one ended it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from tiers import Event, Finished, Generation, Logprobs, TextDelta, Usage
from tiers.cloud._checks import OutputCheck
from tiers.cloud._wire import body_events, stream_events

PLAIN = OutputCheck(Generation(messages=[]), "cloud")
END = "<|im_end|>"


def entry(token: str) -> dict[str, object]:
    return {"token": token, "logprob": -0.1, "bytes": list(token.encode()), "top_logprobs": []}


def body(tokens: list[str], content: str, **ending: object) -> bytes:
    choice = {"message": {"content": content}, "logprobs": {"content": [entry(t) for t in tokens]}, **ending}
    usage = {"prompt_tokens": 5, "completion_tokens": len(tokens)}
    return json.dumps({"model": "smol", "choices": [choice], "usage": usage}).encode()


def scored(events: tuple[Event, ...] | list[Event]) -> list[str]:
    return [t.token for e in events if isinstance(e, Logprobs) for t in e.tokens]


def test_an_answer_that_ended_at_the_end_token_neither_scores_nor_counts_it() -> None:
    answer = body(["Hi", "!", END], "Hi!", finish_reason="stop", stop_reason=None)
    events = body_events(answer, "cloud-0", "m", PLAIN)
    assert scored(events) == ["Hi", "!"]
    assert events[-1] == Finished("stop", Usage(5, 2))


def test_a_stop_string_keeps_its_token_as_the_edge_does() -> None:
    answer = body(["Hi", "!", " Bye"], "Hi!", finish_reason="stop", stop_reason="Bye")
    events = body_events(answer, "cloud-0", "m", PLAIN)
    assert scored(events) == ["Hi", "!", " Bye"]
    assert events[-1] == Finished("stop", Usage(5, 3), stop="Bye")  # named (Anthropic's stop_sequence)


async def test_a_streamed_answer_names_the_stop_string_that_ended_it() -> None:
    chunks = [
        {"model": "smol", "choices": [{"index": 0, "delta": {"content": "Hi!"}}]},
        {
            "model": "smol",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop", "stop_reason": "Bye"}],
        },
        {"model": "smol", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}},
    ]

    async def sent() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"

    events = [e async for e in stream_events(sent(), "cloud-0", "m", PLAIN)]
    assert events[-1] == Finished("stop", Usage(5, 3), stop="Bye")


def test_an_answer_cut_at_max_tokens_or_from_a_server_that_says_no_stop_reason_is_taken_as_it_is() -> None:
    cut = body(["Hi", "!"], "Hi!", finish_reason="length", stop_reason=None)
    assert body_events(cut, "cloud-0", "m", PLAIN)[-1] == Finished("length", Usage(5, 2))
    unsaid = body(["Hi", "!", END], "Hi!", finish_reason="stop")  # no stop_reason at all
    events = body_events(unsaid, "cloud-0", "m", PLAIN)
    assert scored(events) == ["Hi", "!", END] and events[-1] == Finished("stop", Usage(5, 3))


def test_a_server_that_writes_the_end_token_into_the_text_keeps_its_entry() -> None:
    answer = body(["Hi", END], "Hi" + END, finish_reason="stop", stop_reason=None)
    assert scored(body_events(answer, "cloud-0", "m", PLAIN)) == ["Hi", END]


def test_a_legacy_completion_drops_the_end_token_from_its_token_lists() -> None:
    choice = {
        "text": "Hi!",
        "finish_reason": "stop",
        "stop_reason": None,
        "logprobs": {"tokens": ["Hi", "!", END], "token_logprobs": [-0.1, -0.2, -0.3], "top_logprobs": None},
    }
    answer = json.dumps({"choices": [choice], "usage": {"prompt_tokens": 5, "completion_tokens": 3}})
    events = body_events(answer.encode(), "cloud-0", "m", PLAIN)
    assert scored(events) == ["Hi", "!"] and events[-1] == Finished("stop", Usage(5, 2))


async def test_a_stream_drops_the_end_tokens_entry_from_its_last_chunk_and_the_count() -> None:
    def chunk(content: str | None, token: str, **ending: object) -> bytes:
        delta = {} if content is None else {"content": content}
        choice = {"index": 0, "delta": delta, "logprobs": {"content": [entry(token)]}, **ending}
        return b"data: " + json.dumps({"model": "smol", "choices": [choice]}).encode() + b"\n\n"

    usage = {"model": "smol", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
    stream = (
        chunk("Hi", "Hi", finish_reason=None, stop_reason=None)
        + chunk("!", "!", finish_reason=None, stop_reason=None)
        + chunk(None, END, finish_reason="stop", stop_reason=None)
        + b"data: "
        + json.dumps(usage).encode()
        + b"\n\ndata: [DONE]\n\n"
    )

    async def source() -> AsyncIterator[bytes]:
        yield stream

    events = [e async for e in stream_events(source(), "cloud-0", "m", PLAIN)]
    assert scored(events) == ["Hi", "!"]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hi", "!"]
    assert events[-1] == Finished("stop", Usage(5, 2))
