"""A small keep-alive HTTP/1.1 client for the cloud tier's hot path.

Why not aiohttp here: per proxied request ``aiohttp.ClientSession.post`` costs ~145 µs of the
gateway's CPU on this kind of machine, httpx ~550 µs; this client, an asyncio protocol around
httptools (the parser uvicorn uses for our own server side), ~50 µs (``python -m
bench.upstream_client``).  At 2,000 requests/s on one core that difference is a fifth of the
budget.  aiohttp still does everything off the hot path (health checks, metric scrapes, media
fetches).

What it does: POST one JSON body, read the status, then the body whole (:meth:`Response.read`)
or as it arrives (:meth:`Response.chunks`, for SSE; its framing is the caller's).  Connections are
pooled per origin and reused when a response ended cleanly and the server allowed keep-alive; at
most ``max_connections`` are open at once (more callers wait).  Timeouts follow aiohttp's meaning:
``connect_s`` to open a connection, ``read_s`` between any two reads (the first byte included),
``total_s`` for the whole exchange.  Failures raise :class:`UpstreamError` (refused, reset,
closed mid-response, malformed HTTP) or :class:`TimeoutError`.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from urllib.parse import urlsplit

import httptools

_HIGH_WATER = 256 * 1024  # buffered body bytes before reading from the socket pauses


class UpstreamError(Exception):
    """The upstream connection failed or sent something that is not HTTP/1.1."""


class _Connection(asyncio.Protocol):
    """One connection: one exchange at a time, parsed as bytes arrive."""

    def __init__(self, pool: HttpPool, origin: str) -> None:
        self._pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._release_timer: asyncio.TimerHandle | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self.status = 0
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self._framed = False
        self.answered = False  # any byte of the current exchange's answer arrived
        self.closed = False
        self.error: BaseException | None = None

    # -- asyncio.Protocol --------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"malformed HTTP response: {exc}"))
            return
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
        self._pool._forget(self)
        if not self.complete:
            if self.headers_done and not self._framed:
                self.complete = True  # a body with neither a length nor chunks ends at the close
            else:
                why = f"the upstream closed the connection mid-response{f': {exc}' if exc else ''}"
                self.error = self.error or UpstreamError(why)
        self._wake()

    # -- httptools callbacks -------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep_alive = self._parser.should_keep_alive()  # only known inside this callback
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None
            self._chunks, self._buffered = [], 0
            self._pool._release(self)

    def release_when_complete(self, within_s: float) -> None:
        """Back to the pool when the body ends, closed if it has not within ``within_s``."""
        self._release_timer = self._loop.call_later(within_s, self._release_late)

    def _release_late(self) -> None:
        self._release_timer = None
        self.close()
        self._pool._release(self)

    # -- one exchange ----------------------------------------------------------------

    def begin(self, request: bytes) -> None:
        assert self.transport is not None
        self._parser = httptools.HttpResponseParser(self)
        self.status, self.headers_done, self.complete, self.error = 0, False, False, None
        self.keep_alive = self._framed = self.answered = False
        self._chunks, self._buffered = [], 0
        self.transport.write(request)

    async def wait(self, until: float) -> None:
        """Until something arrived, the connection ended, or ``until`` (loop time) passed."""
        if self.error is not None:
            raise self.error
        if until <= self._loop.time():
            raise TimeoutError
        waiter = self._waiter = self._loop.create_future()
        self._timer = self._loop.call_at(until, self._time_out)
        try:
            await waiter
        finally:
            self._timer.cancel()
            self._waiter = None
        if self.error is not None:
            raise self.error

    def take(self) -> bytes:
        data = b"".join(self._chunks) if len(self._chunks) != 1 else self._chunks[0]
        self._chunks, self._buffered = [], 0
        if self._paused and self.transport is not None and not self.closed:
            self._paused = False
            self.transport.resume_reading()
        return data

    @property
    def has_data(self) -> bool:
        return bool(self._chunks)

    @property
    def reusable(self) -> bool:
        return self.complete and self.keep_alive and not self.closed

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _time_out(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(TimeoutError())

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        self.close()
        self._wake()


class Response:
    """The answer to one POST; :meth:`release` (or :meth:`close`) it when done."""

    def __init__(self, pool: HttpPool, conn: _Connection, deadline: float) -> None:
        self._pool = pool
        self._conn = conn
        self._deadline = deadline
        self.status = conn.status
        self._done = False

    def _until(self) -> float:
        return min(self._conn._loop.time() + self._pool.read_s, self._deadline)

    async def read(self) -> bytes:
        """The whole body."""
        conn = self._conn
        parts = []
        while True:
            if conn.has_data:
                parts.append(conn.take())
            if conn.complete:
                return b"".join(parts)
            await conn.wait(self._until())

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives (transfer-chunk framing removed)."""
        conn = self._conn
        while True:
            if conn.has_data:  # first: what arrived while the last chunk was being handled
                yield conn.take()
            elif conn.complete:
                return
            else:
                await conn.wait(self._until())

    def release(self) -> None:
        """Done with it: the connection goes back to the pool once the body has ended (a stream's
        last bytes may still be on their way: they get ``read_s`` to arrive)."""
        if not self._done:
            self._done = True
            conn = self._conn
            if conn.complete or conn.closed:
                self._pool._release(conn)
            else:
                conn.release_when_complete(self._pool.read_s)

    def close(self) -> None:
        """Done with it, perhaps early: a connection whose body has not ended is closed (an
        upstream stops generating then), one whose body ended goes back to the pool."""
        if not self._done:
            self._done = True
            if not self._conn.complete:
                self._conn.close()
            self._pool._release(self._conn)


def _time_out(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class HttpPool:
    def __init__(
        self,
        *,
        max_connections: int = 100,
        connect_s: float = 2.0,
        read_s: float = 120.0,
        total_s: float = 600.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.connect_s = connect_s
        self.read_s = read_s
        self.total_s = total_s
        self._ssl = ssl_context
        self._idle: dict[str, list[_Connection]] = {}
        self._open = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._heads: dict[str, bytes] = {}
        self._closed = False

    async def post(
        self, url: str, body: bytes, headers: Mapping[str, str] | None = None, *,
        deadline: float | None = None, first_byte_s: float | None = None,
    ) -> Response:  # fmt: skip
        """Send ``body``; wait for the answer's headers (``first_byte_s``, default ``read_s``). The
        exchange ends by ``deadline`` (the loop's clock; default ``total_s`` from now)."""
        if self._closed:
            raise UpstreamError("the client is closed")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.total_s if deadline is None else deadline
        first_byte = self.read_s if first_byte_s is None else first_byte_s
        origin, head = self._head(url)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items()) if headers else ""
        request = b"%s%sContent-Length: %d\r\n\r\n%s" % (head, extra.encode("latin-1"), len(body), body)
        for attempt in range(2):
            conn, reused = await self._acquire(origin, deadline, fresh=attempt > 0)
            try:
                conn.begin(request)
                while not conn.headers_done:
                    await conn.wait(min(loop.time() + first_byte, deadline))
            except UpstreamError:
                conn.close()
                self._release(conn)
                # A kept-alive connection the server closed as this request went out (its idle
                # timeout): nothing was answered, so the request goes once more on a new one.
                if reused and attempt == 0 and not conn.answered:
                    continue
                raise
            except BaseException:
                conn.close()
                self._release(conn)
                raise
            return Response(self, conn, deadline)
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for conn in conns:
                conn.close()
        self._idle.clear()

    # -- internals ----------------------------------------------------------------------

    def _head(self, url: str) -> tuple[str, bytes]:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        key = f"{origin}{parts.path}"
        head = self._heads.get(key)
        if head is None:
            path = parts.path or "/"
            head = f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n".encode("latin-1")
            self._heads[key] = head
        return origin, head

    async def _acquire(
        self, origin: str, deadline: float, *, fresh: bool = False
    ) -> tuple[_Connection, bool]:
        """An idle connection to ``origin`` (and True: reused) unless ``fresh``, else a new one,
        else wait (within ``connect_s``) until one is released or closed."""
        loop = asyncio.get_running_loop()
        until = min(loop.time() + self.connect_s, deadline)
        while True:
            idle = None if fresh else self._idle.get(origin)
            while idle:
                conn = idle.pop()
                if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                    return conn, True
            if self._open < self.max_connections:
                self._open += 1  # reserved now, so concurrent callers cannot overshoot
                try:
                    conn = await asyncio.wait_for(self._connect(origin), max(0.0, until - loop.time()))
                    return conn, False
                except BaseException:
                    self._open -= 1
                    self._wake_one()
                    raise
            other = next((c for conns in self._idle.values() for c in conns), None)
            if other is not None:
                other.close()  # an idle connection to another origin gives its place up
            waiter = loop.create_future()
            self._waiters.append(waiter)
            timer = loop.call_at(until, _time_out, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _connect(self, origin: str) -> _Connection:
        parts = urlsplit(origin)
        secure = parts.scheme == "https"
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if secure else 80)
        context = (self._ssl or ssl.create_default_context()) if secure else None
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(
                lambda: _Connection(self, origin),
                host,
                port,
                ssl=context,
                server_hostname=host if secure else None,
            )
        except OSError as exc:
            raise UpstreamError(f"cannot connect to {parts.netloc}: {exc.strerror or exc}") from exc
        return conn

    def _release(self, conn: _Connection) -> None:
        if conn.reusable and not self._closed:
            self._idle.setdefault(conn.origin, []).append(conn)
            self._wake_one()
        else:
            conn.close()

    def _forget(self, conn: _Connection) -> None:
        """Called once when a connection ends: its slot frees and it leaves the idle list."""
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)
        self._open -= 1
        self._wake_one()
