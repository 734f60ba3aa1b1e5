"""The SSE writer (gateway/api/sse.py): what each write carries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from gateway.api.sse import ChunkWriter
from tiers import Event, Finished, Started, TextDelta, Usage


async def _rest(*events: Event) -> AsyncIterator[Event]:
    for event in events:
        yield event


def _writes(first: Event, *rest: Event) -> list[list[dict[str, object] | str]]:
    writer = ChunkWriter("chatcmpl-1", 0, "m", include_usage=True)

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
