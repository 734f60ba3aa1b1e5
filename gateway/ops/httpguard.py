"""Limits on what a client may do before its request reaches the app: slow and oversized headers.

uvicorn's httptools protocol has no deadline for a request's headers (its keep-alive timer
runs only between requests, and every byte received cancels it) and no bound on their size
or count: a client that sends its headers a byte at a time holds a connection for ever, and
one that never ends a header line grows the parser's buffer without limit.  This module's
protocol, a subclass of uvicorn's, adds three limits:

- the headers of each request must arrive within ``header_timeout_s`` of its first byte (or
  of the connection opening): else ``408`` and the connection is closed;
- at most ``max_header_bytes`` of request line and headers: else ``431``, closed;
- at most ``max_headers`` header lines: else ``431``, closed.

Requests the HTTP parser refuses get their ``400`` in OpenAI's error shape too.

And two on the body, so that clients trickling bodies cannot hold every connection:

- the whole body must arrive within ``body_timeout_s`` of the end of the headers;
- after ``body_grace_s``, it must be arriving at ``min_body_bytes_per_s`` on average at least;

else ``408`` (when no response has started) and the connection is closed, on every route. Time
while uvicorn has paused reading (the app is not taking the body as fast as it comes) is not held
against the client. The app is uvicorn's as before.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import msgspec
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)


class HttpSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # A request's line and headers must all arrive within this long (slow-loris clients).
    header_timeout_s: float = 10.0
    max_header_bytes: int = 65536
    max_headers: int = 100
    # An idle keep-alive connection is closed after this long (uvicorn's timeout_keep_alive).
    keep_alive_s: int = 5
    # A request's body must all arrive within this long after its headers (slow bodies) ...
    body_timeout_s: float = 60.0
    # ... and, after body_grace_s, at this many bytes a second on average at least (0: no minimum).
    min_body_bytes_per_s: int = 1024
    body_grace_s: float = 5.0


_BODY_TICK_S = 0.5
_REASONS = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _error(status: int, message: str) -> bytes:
    body = msgspec.json.encode(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
    )
    return b"".join(
        [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n\r\n",
            body,
        ]
    )


class _Rejected(Exception):
    """Raised from a parser callback to stop parsing; uvicorn then calls send_400_response."""


def guarded_protocol(settings: HttpSettings) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol with ``settings``' header limits (pass it as ``http=``)."""

    class GuardedHttpToolsProtocol(HttpToolsProtocol):
        _limits = settings

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: asyncio.TimerHandle | None = None
            self._body_timer: asyncio.TimerHandle | None = None
            self._body_started = 0.0
            self._body_bytes = 0
            self._body_paused_s = 0.0  # time reading was paused by flow control (not the client's)
            self._in_headers = False
            self._header_bytes = 0  # received while the headers were incomplete
            self._parsed_bytes = 0  # request line and headers the parser has handed over
            self._header_count = 0
            self._rejection: tuple[int, str] | None = None

        def _begin_headers(self) -> None:
            self._in_headers = True
            self._header_bytes = self._parsed_bytes = self._header_count = 0
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(
                    self._limits.header_timeout_s, self._headers_timed_out
                )

        def _end_headers(self) -> None:
            self._in_headers = False
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _busy(self) -> bool:
            """A response is still going out on this connection (the client pipelined the next)."""
            return self.cycle is not None and not self.cycle.response_complete

        def _reject(self, status: int, message: str) -> None:
            self._end_headers()
            if not self.transport.is_closing():
                log.info("closing a connection from %s: %d %s", self.client, status, message)
                if not self._busy():  # never write into the middle of another response
                    self.transport.write(_error(status, message))
                self.transport.close()

        def _headers_timed_out(self) -> None:
            self._header_timer = None
            if self._in_headers and self._busy():  # the deadline runs once the connection is free
                self._header_timer = self.loop.call_later(
                    self._limits.header_timeout_s, self._headers_timed_out
                )
            elif self._in_headers:
                limit = self._limits.header_timeout_s
                self._reject(408, f"the request headers did not arrive within {limit}s")

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._begin_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self._end_headers()
            self._end_body()
            super().connection_lost(exc)

        # -- the body -------------------------------------------------------------------------

        def _begin_body(self) -> None:
            self._body_started = self.loop.time()
            self._body_bytes = 0
            self._body_paused_s = 0.0
            self._body_timer = self.loop.call_later(_BODY_TICK_S, self._check_body)

        def _end_body(self) -> None:
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None

        def _check_body(self) -> None:
            self._body_timer = None
            if self.flow.read_paused:  # the app is behind, not the client
                self._body_paused_s += _BODY_TICK_S
            elapsed = self.loop.time() - self._body_started - self._body_paused_s
            limits = self._limits
            if elapsed > limits.body_timeout_s:
                self._reject_body(f"the request body did not arrive within {limits.body_timeout_s:g}s")
            elif (
                limits.min_body_bytes_per_s > 0
                and elapsed > limits.body_grace_s
                and self._body_bytes < limits.min_body_bytes_per_s * elapsed
            ):
                self._reject_body(
                    f"the request body arrives slower than {limits.min_body_bytes_per_s} bytes/s"
                )
            else:
                self._body_timer = self.loop.call_later(_BODY_TICK_S, self._check_body)

        def _reject_body(self, message: str) -> None:
            if self.transport.is_closing():
                return
            log.info("closing a connection from %s: 408 %s", self.client, message)
            if self.cycle is None or not self.cycle.response_started:
                self.transport.write(_error(408, message))
            self.transport.close()  # the app waiting for the body hears a disconnect

        def on_body(self, body: bytes) -> None:
            self._body_bytes += len(body)
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._end_body()
            super().on_message_complete()

        def data_received(self, data: bytes) -> None:
            if self._in_headers:
                self._header_bytes += len(data)
            super().data_received(data)
            # Still inside the headers: every byte so far was request line and headers.
            if self._in_headers and self._header_bytes > self._limits.max_header_bytes:
                limit = self._limits.max_header_bytes
                self._reject(431, f"the request headers are larger than {limit} bytes")

        def send_400_response(self, msg: str) -> None:
            """The parser refused the request (or our callback stopped it): answer in OpenAI's shape."""
            self._reject(*(self._rejection or (400, "malformed HTTP request: " + msg)))

        def on_message_begin(self) -> None:
            super().on_message_begin()
            if not self._in_headers:  # the next request on a kept-alive connection
                self._begin_headers()

        def _parsed(self, size: int) -> None:
            """Count what the parser took from one data chunk (which may hold a whole request)."""
            self._parsed_bytes += size
            if self._parsed_bytes > self._limits.max_header_bytes:
                limit = self._limits.max_header_bytes
                self._rejection = (431, f"the request headers are larger than {limit} bytes")
                raise _Rejected

        def on_url(self, url: bytes) -> None:
            self._parsed(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._header_count += 1
            if self._header_count > self._limits.max_headers:
                self._rejection = (431, f"more than {self._limits.max_headers} request headers")
                raise _Rejected
            self._parsed(len(name) + len(value) + 4)
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._end_headers()
            super().on_headers_complete()
            self._begin_body()  # ended at once by on_message_complete when there is no body

    return GuardedHttpToolsProtocol
