"""The chat handler's own body reader and JSON answer (gateway/api/asgi_io.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.api.asgi_io import JSONAnswer, SSEResponse, read_body
from gateway.errors import InvalidRequest, PayloadTooLarge


def _receiver(*messages: dict[str, Any]) -> Any:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    return receive


def _read(receive: Any, content_length: str | None, limit: int = 10) -> bytes:
    return asyncio.run(read_body(receive, content_length, limit))


def test_joins_the_chunks_of_a_body() -> None:
    receive = _receiver(
        {"type": "http.request", "body": b"abc", "more_body": True},
        {"type": "http.request", "body": b"", "more_body": True},
        {"type": "http.request", "body": b"def", "more_body": False},
    )
    assert _read(receive, "6") == b"abcdef"
    assert _read(_receiver({"type": "http.request", "body": b"", "more_body": False}), None) == b""


def test_an_announced_length_over_the_limit_is_refused_before_reading() -> None:
    def never() -> Any:
        raise AssertionError("read a body announced too large")

    with pytest.raises(PayloadTooLarge):
        _read(never, "11")


def test_a_body_longer_than_announced_or_unannounced_is_cut_at_the_limit() -> None:
    chunks = [{"type": "http.request", "body": b"x" * 6, "more_body": True} for _ in range(3)]
    with pytest.raises(PayloadTooLarge):
        _read(_receiver(*chunks), None)
    with pytest.raises(PayloadTooLarge):
        _read(_receiver(*chunks), "5")


def test_a_bad_length_or_a_client_that_leaves_is_a_400() -> None:
    with pytest.raises(InvalidRequest, match="Content-Length"):
        _read(_receiver(), "12abc")
    receive = _receiver(
        {"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}
    )
    with pytest.raises(InvalidRequest, match="disconnected"):
        _read(receive, "4")


def test_json_answer_sends_its_headers_and_body_once() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    answer = JSONAnswer(b'{"a":1}', {"X-Tiergate-Tier": "edge"}, status=201)
    asyncio.run(answer({}, _receiver(), send))  # type: ignore[arg-type]
    start, body = sent
    assert start["status"] == 201
    assert dict(start["headers"]) == {
        b"content-type": b"application/json",
        b"content-length": b"7",
        b"x-tiergate-tier": b"edge",
    }
    assert body == {"type": "http.response.body", "body": b'{"a":1}', "more_body": False}


def test_event_stream_sends_each_event_then_ends_the_body() -> None:
    sent: list[dict[str, Any]] = []

    async def events() -> Any:
        yield b"data: 1\n\n"
        yield b"data: 2\n\n"

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        stay = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await stay.wait()  # the client stays
            return {"type": "http.disconnect"}

        await SSEResponse(events(), {"X-Tiergate-Tier": "cloud"})({}, receive, send)  # type: ignore[arg-type]

    asyncio.run(main())
    start, *bodies = sent
    assert start["status"] == 200
    assert (b"content-type", b"text/event-stream") in start["headers"]
    assert (b"x-tiergate-tier", b"cloud") in start["headers"]
    assert [b["body"] for b in bodies] == [b"data: 1\n\n", b"data: 2\n\n", b""]
    assert [b["more_body"] for b in bodies] == [True, True, False]


def test_event_stream_closes_its_events_when_the_client_leaves_mid_wait() -> None:
    closed, first_sent = asyncio.Event(), asyncio.Event()
    sent: list[dict[str, Any]] = []

    async def events() -> Any:
        try:
            yield b"data: 1\n\n"
            await asyncio.sleep(3600)  # an upstream that hangs after its first chunk
            yield b"never"
        finally:
            closed.set()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message.get("body"):
            first_sent.set()

    async def main() -> None:
        leave = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await leave.wait()
            return {"type": "http.disconnect"}

        task = asyncio.ensure_future(SSEResponse(events(), {})({}, receive, send))  # type: ignore[arg-type]
        await asyncio.wait_for(first_sent.wait(), 5)
        leave.set()
        await asyncio.wait_for(task, 5)  # returns normally: the cancellation was the stream's own
        assert closed.is_set()
        assert not task.cancelled()

    asyncio.run(main())
    assert [m.get("body") for m in sent[1:]] == [b"data: 1\n\n"]


def test_event_stream_lets_an_outside_cancellation_through() -> None:
    async def events() -> Any:
        yield b"data: 1\n\n"
        await asyncio.sleep(3600)
        yield b"never"

    async def send(message: dict[str, Any]) -> None:
        pass

    async def main() -> None:
        stay = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await stay.wait()
            return {"type": "http.disconnect"}

        task = asyncio.ensure_future(SSEResponse(events(), {})({}, receive, send))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        task.cancel()  # a server shutting down, say
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
