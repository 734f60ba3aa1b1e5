"""Legacy completions on the cloud tier: a raw prompt goes to vLLM's /v1/completions as it is, and its
answers (``choices[].text``, completions-format logprobs, JSON or streamed) are read as the same events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from tiers import (
    ChoiceDone,
    Event,
    Finished,
    Generation,
    Logprobs,
    Started,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from tiers.cloud._checks import OutputCheck
from tiers.cloud._wire import body_events, path_of, request_body, stream_events

PROMPT = "The capital of France is"
RAW = Generation(messages=[{"role": "user", "content": PROMPT}], prompt=PROMPT, max_tokens=8, temperature=0.0)


def test_a_raw_prompt_goes_to_the_completions_endpoint_as_it_is() -> None:
    assert path_of(RAW) == "/v1/completions"
    assert path_of(Generation(messages=[{"role": "user", "content": "Hi"}])) == "/v1/chat/completions"
    body = json.loads(request_body(RAW, "smol"))
    assert body == {"model": "smol", "stream": False, "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0}


def test_completions_logprobs_are_the_number_of_alternatives_and_a_stream_asks_for_usage() -> None:
    gen = Generation(messages=[], prompt=PROMPT, logprobs=True, top_logprobs=2, stream=True, stop=["."], n=2)
    body = json.loads(request_body(gen, "smol"))
    assert body["logprobs"] == 2 and "top_logprobs" not in body
    assert body["stream_options"] == {"include_usage": True}
    assert (body["stop"], body["n"], body["prompt"]) == (["."], 2, PROMPT)
    assert "messages" not in body


def test_a_completions_body_is_read_with_its_text_and_logprobs() -> None:
    logprobs = {
        "tokens": [" Paris", "."],
        "token_logprobs": [-0.25, -1.5],
        "top_logprobs": [{" Paris": -0.25, " Lyon": -2.0}, {".": -1.5}],
        "text_offset": [0, 6],
    }
    body = {
        "object": "text_completion",
        "model": "smol",
        "choices": [
            {"index": 0, "text": " Paris.", "logprobs": logprobs, "finish_reason": "length"},
            {"index": 1, "text": " Lyon", "logprobs": None, "finish_reason": "stop"},
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "prompt_tokens_details": None},
    }
    gen = Generation(messages=[], prompt=PROMPT, n=2, temperature=1.0, logprobs=True, top_logprobs=1)
    events = body_events(json.dumps(body).encode(), "r1", "smol", OutputCheck(gen, "cloud"))
    scored = [
        TokenLogprob(" Paris", -0.25, None, [TopLogprob(" Paris", -0.25), TopLogprob(" Lyon", -2.0)]),
        TokenLogprob(".", -1.5, None, [TopLogprob(".", -1.5)]),
    ]
    assert events == (
        Started("r1", "smol"),
        Logprobs(scored, 0),
        TextDelta(" Paris.", 0),
        TextDelta(" Lyon", 1),
        ChoiceDone(1, "stop"),
        Finished("length", Usage(5, 3)),
    )


def _chunk(text: str, finish: str | None = None, logprobs: object = None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
    body = {"object": "text_completion", "model": "smol", "choices": [choice]}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


USAGE = b'data: {"model": "smol", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2}}\n\n'


async def _cut(body: bytes, size: int) -> AsyncIterator[bytes]:
    for at in range(0, len(body), size):
        yield body[at : at + size]


@pytest.mark.parametrize("size", [1, 7, 10_000])
async def test_a_streamed_completion_gives_its_text_pieces_then_the_usage(size: int) -> None:
    body = _chunk(" Par") + _chunk("is") + _chunk("", "length") + USAGE + b"data: [DONE]\n\n"
    check = OutputCheck(Generation(messages=[], prompt=PROMPT, stream=True), "cloud")
    events: list[Event] = [e async for e in stream_events(_cut(body, size), "r1", "smol", check)]
    assert events == [
        Started("r1", "smol"),
        TextDelta(" Par"),
        TextDelta("is"),
        Finished("length", Usage(5, 2)),
    ]


async def test_streamed_completion_logprobs_ride_with_their_text() -> None:
    logprobs = {"tokens": [" Paris"], "token_logprobs": [-0.5], "top_logprobs": [{" Paris": -0.5}]}
    body = _chunk(" Paris", logprobs=logprobs)
    body += _chunk("", "stop") + USAGE + b"data: [DONE]\n\n"
    check = OutputCheck(Generation(messages=[], prompt=PROMPT, stream=True, logprobs=True), "cloud")
    events = [e async for e in stream_events(_cut(body, 64), "r1", "smol", check)]
    assert events[1:3] == [
        Logprobs([TokenLogprob(" Paris", -0.5, None, [TopLogprob(" Paris", -0.5)])]),
        TextDelta(" Paris"),
    ]
    assert events[-1] == Finished("stop", Usage(5, 2))
