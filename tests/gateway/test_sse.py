"""The SSE writer (gateway/api/sse.py): what each write carries."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from gateway.api.sse import ChunkWriter
from tiers import Delta, Usage


async def _rest(*deltas: Delta) -> AsyncIterator[Delta]:
    for delta in deltas:
        yield delta


def _writes(first: Delta, *rest: Delta) -> list[list[dict[str, object] | str]]:
    writer = ChunkWriter("chatcmpl-1", 0, "m", include_usage=True)

    async def collect() -> list[bytes]:
        return [w async for w in writer.events(first, _rest(*rest))]

    frames = []
    for write in asyncio.run(collect()):
        events = [e.removeprefix(b"data: ") for e in write.split(b"\n\n") if e]
        frames.append([e.decode() if e == b"[DONE]" else json.loads(e) for e in events])
    return frames


def test_the_role_and_the_first_text_share_a_write_and_the_ending_shares_another() -> None:
    writes = _writes(Delta(text="Hel"), Delta(text="lo"), Delta(finish_reason="stop", usage=Usage(3, 2)))
    assert len(writes) == 3
    role, first = writes[0]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["delta"] == {"content": "Hel"}
    assert [f["choices"][0]["delta"] for f in writes[1]] == [{"content": "lo"}]
    finish, usage, done = writes[2]
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["usage"]["completion_tokens"] == 2
    assert done == "[DONE]"


def test_a_first_delta_without_text_sends_the_role_alone() -> None:
    writes = _writes(Delta(), Delta(text="x"), Delta(finish_reason="length"))
    assert [len(w) for w in writes] == [1, 1, 2]
    assert writes[1][0]["choices"][0]["delta"] == {"content": "x"}
