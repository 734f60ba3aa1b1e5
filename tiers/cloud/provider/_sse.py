"""Server-sent events (the WHATWG framing every provider streams in) read from a body's bytes as they
arrive: ``event:`` and ``data:`` lines up to a blank line make one :class:`SseEvent`; comments
(``:`` lines, keep-alives) and ``id:``/``retry:`` fields are skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tiers.cloud.provider._dialect import SseEvent


async def sse_events(chunks: AsyncIterator[bytes]) -> AsyncIterator[SseEvent]:
    """The events of an SSE body; an event left unterminated when the body ends is yielded too."""
    rest = b""
    name = ""
    data: list[bytes] = []
    async for chunk in chunks:
        *lines, rest = (rest + chunk).split(b"\n")
        for raw in lines:
            line = raw.removesuffix(b"\r")
            if not line:
                if data or name:
                    yield SseEvent(name, b"\n".join(data))
                name, data = "", []
                continue
            field, _, value = line.partition(b":")
            value = value.removeprefix(b" ")
            if field == b"data":
                data.append(value)
            elif field == b"event":
                name = value.decode("utf-8", "replace")
    line = rest.removesuffix(b"\r")
    if line.startswith(b"data:"):
        data.append(line[5:].removeprefix(b" "))
    if data:
        yield SseEvent(name, b"\n".join(data))
