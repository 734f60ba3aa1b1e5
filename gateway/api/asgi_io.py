"""The chat handler's request body and answers, straight on ASGI messages.

Litestar's ``Request.body()`` builds the header mapping and a stream generator, and its
``ASGIResponse`` a mutable header mapping with generic ``setdefault``: together ~8% of a
proxied request's CPU.  Its streaming response watches for the client leaving in an anyio task
group (cancel scopes, a spawned task per response).  The chat path reads one body and sends one
JSON answer or one event stream, so it does these itself, with the same limits, errors and
cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from typing import cast

from litestar.types import HTTPReceiveMessage, Receive, Scope, Send

from gateway.errors import BODY_TOO_LARGE, InvalidRequest, PayloadTooLarge


async def read_body(receive: Receive, content_length: str | None, limit: int) -> bytes:
    """The whole request body; 413 over ``limit`` bytes (announced or received), 400 when the
    client left before sending it all."""
    if content_length is not None:
        try:
            announced = int(content_length)
        except ValueError:
            raise InvalidRequest(f"invalid Content-Length: {content_length!r}") from None
        if announced > limit:
            raise PayloadTooLarge(BODY_TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    while True:
        # An HTTP scope receives http.request or http.disconnect; Litestar's Receive type also
        # lists the WebSocket messages.
        message = cast(HTTPReceiveMessage, await receive())
        if message["type"] == "http.disconnect":
            raise InvalidRequest("the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(BODY_TOO_LARGE)
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()]


class JSONAnswer:
    """A complete ``application/json`` response (an ASGI app a handler may return)."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, body: bytes, headers: Mapping[str, str], status: int = 200, media_type: str = "application/json"
    ) -> None:
        self.body = body
        self.status = status
        self.headers = [
            (b"content-type", media_type.encode("latin-1")),
            (b"content-length", str(len(body)).encode()),
            *_encoded(headers),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})


async def until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class SSEResponse:
    """A ``text/event-stream`` response sending each event as ``events`` yields it.

    When the client leaves, the request's task is cancelled wherever it waits (for the upstream's
    next chunk, typically) and ``events`` is closed, which cancels the upstream request.
    """

    __slots__ = ("events", "headers")

    def __init__(self, events: AsyncGenerator[bytes, None], headers: Mapping[str, str]) -> None:
        self.events = events
        self.headers = [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            *_encoded(headers),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.current_task()
        assert task is not None
        left = finished = False

        def on_disconnect(watch: asyncio.Future[None]) -> None:
            nonlocal left
            if not finished and not watch.cancelled() and watch.exception() is None:
                left = True
                task.cancel()

        watch = asyncio.ensure_future(until_disconnect(receive))
        watch.add_done_callback(on_disconnect)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.headers})
            async for event in self.events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not left:
                raise
            task.uncancel()  # our own cancellation: the client left, the response ends here
        finally:
            finished = True
            watch.cancel()
            await self.events.aclose()
