"""The raw ASGI handlers' one prologue (chat, Responses, completions, embeddings, Messages): POST only, the
services, the few headers the pipeline reads, the bounded body reader, the request id and the metric
labels, as one :class:`~gateway.pipeline.front.Incoming`; and the client's departure, watched from
the moment its body is in.

A JSON answer is made before anything is sent, so a client that leaves meanwhile would otherwise
have its answer made to the end for nobody: :class:`Departure` cancels the request's task when the
client disconnects, and the request ends as "client gone", billed for what the tier had made
(gateway/pipeline/ending.py).  A stream watches its client itself (:class:`~gateway.api.asgi_io.SSEResponse`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from litestar.exceptions import MethodNotAllowedException
from litestar.types import ASGIApp, Receive, Scope, Send

from gateway.api.asgi_io import read_body, until_disconnect
from gateway.api.framing import chat_headers
from gateway.ops.request_id import request_id
from gateway.pipeline.front import Incoming
from gateway.services import Services, services_of


class Departure:
    """Cancels the request's task when its client disconnects, once :meth:`arm`-ed (before that,
    ``receive`` is the body reader's)."""

    __slots__ = ("_closed", "_receive", "_task", "_watch", "left")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._watch: asyncio.Future[None] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._closed = False
        self.left = False

    def arm(self) -> None:
        if self._watch is not None or self._closed:
            return
        self._task = asyncio.current_task()
        self._watch = asyncio.ensure_future(until_disconnect(self._receive))
        self._watch.add_done_callback(self._gone)

    def _gone(self, watch: asyncio.Future[None]) -> None:
        if not self._closed and not watch.cancelled() and watch.exception() is None and self._task:
            self.left = True
            self._task.cancel()

    def close(self) -> None:
        """Stop watching (before a stream's own watch takes over, or once the answer is sent)."""
        self._closed = True
        if self._watch is not None:
            self._watch.cancel()


def door(scope: Scope, receive: Receive, **incoming: Any) -> tuple[Services, Incoming, Departure]:
    """The services, the request as the pipeline takes it (``incoming``: its ``parse``,
    ``endpoint``, ``raw_prompt``), and its client's departure."""
    if scope["method"] != "POST":  # type: ignore[typeddict-item]
        raise MethodNotAllowedException(headers={"Allow": "POST"})
    services = services_of(scope["app"].state)  # a raw ASGI handler: no dependency injection
    headers = chat_headers(scope)
    limit = services.settings.server.max_body_bytes
    departure = Departure(receive)

    async def body() -> bytes:
        read = await read_body(receive, headers.get("content-length"), limit)
        departure.arm()
        return read

    def noted(tenant: str, model: str) -> None:
        services.observer.note(scope, tenant, model)

    return services, Incoming(headers, body, request_id(scope), noted, **incoming), departure


async def respond(
    scope: Scope, receive: Receive, send: Send, departure: Departure, make: Callable[[], Awaitable[ASGIApp]]
) -> None:
    """Sends what ``make`` answers; a client that left while it was made ends its request there,
    quietly (nothing is sent; the ledger says 499 and what the tier made)."""
    try:
        response = await make()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if not departure.left or task is None:
            raise
        task.uncancel()  # our own cancellation: the client left
        return
    finally:
        departure.close()  # a stream's response watches its client itself
    await response(scope, receive, send)
