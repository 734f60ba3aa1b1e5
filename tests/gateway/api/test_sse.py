"""The SSE writer (gateway/api/sse.py): what each write carries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from gateway.api.sse import ChunkWriter
from tests.openai_schema import CHAT_COMPLETION_CHUNK, validate
from tiers import (
    ChoiceDone,
    Event,
    Finished,
    Logprobs,
    Started,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Usage,
)


async def _rest(*events: Event) -> AsyncIterator[Event]:
    for event in events:
        yield event


def _writes(first: Event, *rest: Event, choices: int = 1) -> list[list[dict[str, object] | str]]:
    writer = ChunkWriter(
        "chatcmpl-1", 0, "m", include_usage=True, fingerprint="tiergate-0:edge:m", choices=choices
    )

    async def collect() -> list[bytes]:
        return [w async for w in writer.events(first, _rest(*rest))]

    frames = []
    for write in asyncio.run(collect()):
        events = [e.removeprefix(b"data: ") for e in write.split(b"\n\n") if e]
        frames.append([e.decode() if e == b"[DONE]" else json.loads(e) for e in events])
    return frames


def test_the_role_and_the_first_text_share_a_write_and_the_ending_shares_another() -> None:
    writes = _writes(TextDelta("Hel"), TextDelta("lo"), Finished("stop", Usage(3, 2)))
    assert len(writes) == 3
    role, first = writes[0]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["delta"] == {"content": "Hel"}
    assert [f["choices"][0]["delta"] for f in writes[1]] == [{"content": "lo"}]
    finish, usage, done = writes[2]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["usage"]["completion_tokens"] == 2
    assert done == "[DONE]"


def test_a_first_event_without_text_sends_the_role_alone() -> None:
    writes = _writes(Started(), TextDelta("x"), Finished("length", Usage(3, 1)))
    assert [len(w) for w in writes] == [1, 1, 3]  # the last: finish, usage, [DONE]
    assert writes[1][0]["choices"][0]["delta"] == {"content": "x"}


def _chunks(writes: list[list[dict[str, object] | str]]) -> list[dict[str, object]]:
    chunks = [c for w in writes for c in w if isinstance(c, dict)]
    for chunk in chunks:
        validate(CHAT_COMPLETION_CHUNK, chunk)  # OpenAI's own schema
    return chunks


def test_tool_calls_stream_id_and_name_first_then_arguments_and_finish_as_tool_calls() -> None:
    writes = _writes(
        ToolCallDelta(0, "call_1", "get_weather"),
        ToolCallDelta(0, arguments='{"city": '),
        ToolCallDelta(0, arguments='"Oslo"}'),
        Finished("tool_calls", Usage(9, 7)),
    )
    deltas = [c["choices"][0]["delta"] for c in _chunks(writes) if c["choices"]]  # type: ignore[index]
    assert deltas[1] == {
        "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather"}}]
    }
    assert [d["tool_calls"][0]["function"]["arguments"] for d in deltas[2:4]] == ['{"city": ', '"Oslo"}']
    assert "id" not in deltas[2]["tool_calls"][0]
    assert _chunks(writes)[-2]["choices"][0]["finish_reason"] == "tool_calls"  # type: ignore[index]


def test_logprobs_ride_with_their_text_and_each_choice_finishes_on_its_own() -> None:
    scored = Logprobs([TokenLogprob("Hi", -0.5, [72, 105], [TopLogprob("Hi", -0.5, [72, 105])])])
    writes = _writes(
        scored,
        TextDelta("Hi"),
        TextDelta("Yo", 1),
        ChoiceDone(1, "length"),
        Finished("stop", Usage(3, 2)),
        choices=2,
    )
    chunks = _chunks(writes)
    roles = [c["choices"][0]["index"] for c in chunks[:2]]  # type: ignore[index]
    assert roles == [0, 1]
    hi = next(c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content") == "Hi")  # type: ignore[index,union-attr]
    assert hi["choices"][0]["logprobs"]["content"][0]["top_logprobs"][0]["token"] == "Hi"  # type: ignore[index]
    ends = [
        (c["choices"][0]["index"], c["choices"][0]["finish_reason"])
        for c in chunks
        if c["choices"] and c["choices"][0]["finish_reason"]
    ]  # type: ignore[index]
    assert ends == [(1, "length"), (0, "stop")]
    assert all(c["system_fingerprint"] == "tiergate-0:edge:m" for c in chunks)
