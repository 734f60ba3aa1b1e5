"""vLLM's answers read as the tier's events: a streamed body however its bytes are cut, an answer
without text, a JSON body."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import msgspec
import pytest

from tiers import Event, Finished, Started, TextDelta, Usage
from tiers.cloud._wire import body_events, stream_events


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
    events = await _events(stream_events(_cut(BODY, size), "cloud-0", "configured"))
    assert events == [
        Started("cloud-0", "smol"),  # the model the chunks name
        TextDelta("Hel"),
        TextDelta("lo"),
        Finished("length", Usage(9, 2)),
    ]


async def test_an_answer_without_text_still_starts_and_finishes() -> None:
    body = _chunk(None, "stop") + b"data: [DONE]"  # and no newline after the last line
    events = await _events(stream_events(_cut(body, 5), "cloud-1", "configured"))
    assert events == [Started("cloud-1", "smol"), Finished("stop", Usage(0, 0))]


async def test_a_chunk_that_is_not_json_is_a_decode_error() -> None:
    with pytest.raises(msgspec.DecodeError):
        await _events(stream_events(_cut(b"data: {not json\n\n", 64), "cloud-0", "m"))


async def test_a_json_body_is_one_piece_of_text_between_start_and_finish() -> None:
    body = json.dumps(
        {
            "model": "smol",
            "choices": [{"message": {"content": "Hello there"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 4, "completion_tokens": 2},
        }
    ).encode()
    events = body_events(body, "cloud-0", "configured")
    assert events == (Started("cloud-0", "smol"), TextDelta("Hello there"), Finished("stop", Usage(4, 2)))
    empty = b'{"choices": [{"message": {"content": null}}]}'
    assert body_events(empty, "cloud-0", "configured") == (
        Started("cloud-0", "configured"),
        Finished("stop", Usage(0, 0)),
    )
