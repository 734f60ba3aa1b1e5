"""The chat handler's request body and JSON answer, straight on ASGI messages.

Litestar's ``Request.body()`` builds the header mapping and a stream generator, and its
``ASGIResponse`` a mutable header mapping with generic ``setdefault``: together ~8% of a
proxied request's CPU.  The chat path reads one body and sends one JSON answer, so it does
both itself, with the same limit and the same errors.
"""

from __future__ import annotations

from collections.abc import Mapping

from litestar.types import Receive, Scope, Send

from gateway.errors import InvalidRequest, PayloadTooLarge

TOO_LARGE = "the request body is larger than this gateway accepts (setting server.max_body_bytes)"


async def read_body(receive: Receive, content_length: str | None, limit: int) -> bytes:
    """The whole request body; 413 over ``limit`` bytes (announced or received), 400 when the
    client left before sending it all."""
    if content_length is not None:
        try:
            announced = int(content_length)
        except ValueError:
            raise InvalidRequest(f"invalid Content-Length: {content_length!r}") from None
        if announced > limit:
            raise PayloadTooLarge(TOO_LARGE)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("the client disconnected before sending the whole body")
        chunk = message.get("body", b"")  # type: ignore[union-attr]
        if chunk:
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(TOO_LARGE)
            chunks.append(chunk)
        if not message.get("more_body", False):  # type: ignore[union-attr]
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class JSONAnswer:
    """A complete ``application/json`` response (an ASGI app a handler may return)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, body: bytes, headers: Mapping[str, str], status: int = 200) -> None:
        self.body = body
        self.status = status
        self.headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *((name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers.items()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body, "more_body": False})
