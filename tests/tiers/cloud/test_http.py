"""The cloud tier's HTTP/1.1 client against a scripted loopback server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from tiers.cloud._http import HttpPool, UpstreamError

Reply = Callable[[asyncio.StreamReader, asyncio.StreamWriter], "asyncio.Future[None] | object"]

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'


class Server:
    """Answers each request with what ``reply`` writes; counts connections and requests."""

    def __init__(self, reply: Callable[[asyncio.StreamWriter, bytes], object]) -> None:
        self.reply = reply
        self.connections = 0
        self.requests: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                result = self.reply(writer, body)
                if asyncio.iscoroutine(result):
                    await result
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}/v1/chat/completions"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., object]]:
    servers: list[Server] = []

    async def start(reply: Callable[[asyncio.StreamWriter, bytes], object]) -> Server:
        server = Server(reply)
        server.server = await asyncio.start_server(server._serve, "127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for s in servers:
        assert s.server is not None
        s.server.close()


async def test_keep_alive_reuses_one_connection_and_sends_the_body(serve) -> None:  # type: ignore[no-untyped-def]
    server = await serve(lambda w, body: w.write(OK))
    pool = HttpPool()
    for i in range(5):
        resp = await pool.post(server.url, b'{"n":%d}' % i, {"X-Request-ID": f"r{i}"})
        assert (resp.status, await resp.read()) == (200, b'{"ok":true}')
        resp.release()
    await pool.aclose()
    assert server.connections == 1
    assert server.requests[3].endswith(b'{"n":3}')
    assert b"X-Request-ID: r3\r\n" in server.requests[3]
    assert b"Host: 127.0.0.1:" in server.requests[0]


async def test_chunked_sse_arrives_whole_across_chunks_and_the_connection_is_reused(serve) -> None:  # type: ignore[no-untyped-def]
    async def stream(w: asyncio.StreamWriter, body: bytes) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for event in (b'data: {"a":1}\n\n', b'data: {"a":2}\n\ndata: [DONE]\n\n'):
            w.write(b"%x\r\n%s\r\n" % (len(event), event))
            await w.drain()
            await asyncio.sleep(0.01)
        w.write(b"0\r\n\r\n")

    server = await serve(stream)
    pool = HttpPool()
    for _ in range(2):
        resp = await pool.post(server.url, b"{}")
        body = b"".join([chunk async for chunk in resp.chunks()])  # its lines: tests/tiers/cloud/test_wire.py
        assert body == b'data: {"a":1}\n\ndata: {"a":2}\n\ndata: [DONE]\n\n'
        resp.release()
    await pool.aclose()
    assert server.connections == 1


async def test_a_stream_released_before_its_last_bytes_goes_back_to_the_pool_when_they_come(serve) -> None:  # type: ignore[no-untyped-def]
    async def stream(w: asyncio.StreamWriter, body: bytes) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        w.write(b"e\r\ndata: [DONE]\n\n\r\n")
        await w.drain()
        await asyncio.sleep(0.05)
        w.write(b"0\r\n\r\n")

    server = await serve(stream)
    pool = HttpPool()
    resp = await pool.post(server.url, b"{}")
    async for chunk in resp.chunks():
        if b"data: [DONE]" in chunk:
            break
    resp.release()  # the terminating chunk has not arrived yet
    await asyncio.sleep(0.1)
    resp = await pool.post(server.url, b"{}")
    resp.close()
    await pool.aclose()
    assert server.connections == 1


async def test_a_close_mid_body_is_an_error_and_the_connection_is_not_reused(serve) -> None:  # type: ignore[no-untyped-def]
    def half(w: asyncio.StreamWriter, body: bytes) -> None:
        w.write(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial')
        w.close()

    server = await serve(half)
    pool = HttpPool()
    resp = await pool.post(server.url, b"{}")
    with pytest.raises(UpstreamError, match="closed the connection mid-response"):
        await resp.read()
    resp.close()
    server.reply = lambda w, body: w.write(OK)
    resp = await pool.post(server.url, b"{}")
    assert await resp.read() == b'{"ok":true}'
    resp.release()
    await pool.aclose()
    assert server.connections == 2


async def test_a_body_without_a_length_ends_at_the_close(serve) -> None:  # type: ignore[no-untyped-def]
    def no_length(w: asyncio.StreamWriter, body: bytes) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it")
        w.close()

    pool = HttpPool()
    resp = await pool.post((await serve(no_length)).url, b"{}")
    assert await resp.read() == b"all of it"
    resp.release()
    await pool.aclose()


async def test_silence_after_the_headers_times_out_after_read_s(serve) -> None:  # type: ignore[no-untyped-def]
    def hang(w: asyncio.StreamWriter, body: bytes) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")

    pool = HttpPool(read_s=0.2)
    resp = await pool.post((await serve(hang)).url, b"{}")
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await resp.read()
    assert 0.15 < loop.time() - started < 1.0
    resp.close()
    await pool.aclose()


async def test_no_answer_at_all_times_out_and_total_s_bounds_a_trickle(serve) -> None:  # type: ignore[no-untyped-def]
    async def trickle(w: asyncio.StreamWriter, body: bytes) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(100):
            w.write(b"x")
            await w.drain()
            await asyncio.sleep(0.05)

    pool = HttpPool(read_s=0.2, total_s=0.5)
    with pytest.raises(TimeoutError):
        await pool.post((await serve(lambda w, body: None)).url, b"{}")
    loop = asyncio.get_running_loop()
    started = loop.time()
    resp = await pool.post((await serve(trickle)).url, b"{}")
    with pytest.raises(TimeoutError):
        await resp.read()  # every read comes within read_s, the whole does not come within total_s
    assert loop.time() - started < 1.5
    resp.close()
    await pool.aclose()


async def test_refused_and_malformed_answers_are_upstream_errors(serve) -> None:  # type: ignore[no-untyped-def]
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    pool = HttpPool()
    with pytest.raises(UpstreamError, match="cannot connect"):
        await pool.post(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}")
    server = await serve(lambda w, body: w.write(b"SMTP ready\r\n\r\n"))
    with pytest.raises(UpstreamError, match="malformed"):
        await pool.post(server.url, b"{}")
    await pool.aclose()


async def test_max_connections_bounds_what_is_open_at_once(serve) -> None:  # type: ignore[no-untyped-def]
    async def slow(w: asyncio.StreamWriter, body: bytes) -> None:
        await asyncio.sleep(0.05)
        w.write(OK)

    server = await serve(slow)
    pool = HttpPool(max_connections=2)

    async def one() -> bytes:
        resp = await pool.post(server.url, b"{}")
        try:
            return await resp.read()
        finally:
            resp.release()

    answers = await asyncio.gather(*(one() for _ in range(6)))
    await pool.aclose()
    assert answers == [b'{"ok":true}'] * 6
    assert server.connections == 2


async def test_what_arrives_while_a_chunk_is_handled_is_not_lost_when_the_body_ends(serve) -> None:  # type: ignore[no-untyped-def]
    async def two_parts(w: asyncio.StreamWriter, body: bytes) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
        await w.drain()
        await asyncio.sleep(0.02)
        w.write(b"6\r\nlast!\n\r\n0\r\n\r\n")  # the rest and the end in one write

    pool = HttpPool()
    resp = await pool.post((await serve(two_parts)).url, b"{}")
    seen = []
    async for chunk in resp.chunks():
        seen.append(chunk)
        await asyncio.sleep(0.05)  # the rest and the end arrive meanwhile
    assert b"".join(seen) == b"first\nlast!\n"
    resp.release()
    await pool.aclose()


async def test_a_kept_alive_connection_closed_by_the_server_is_retried_once_on_a_new_one(serve) -> None:  # type: ignore[no-untyped-def]
    served = 0

    def second_request_on_a_connection_is_dropped(w: asyncio.StreamWriter, body: bytes) -> None:
        nonlocal served
        served += 1
        if served == 2:  # the server's idle timeout closed it as the request arrived
            w.close()
        else:
            w.write(OK)

    server = await serve(second_request_on_a_connection_is_dropped)
    pool = HttpPool()
    for _ in range(2):
        resp = await pool.post(server.url, b"{}")
        assert await resp.read() == b'{"ok":true}'
        resp.release()
    await pool.aclose()
    assert (served, server.connections) == (3, 2)


async def test_a_new_connection_closed_without_an_answer_is_not_retried(serve) -> None:  # type: ignore[no-untyped-def]
    server = await serve(lambda w, body: w.close())
    pool = HttpPool()
    with pytest.raises(UpstreamError):
        await pool.post(server.url, b"{}")
    await pool.aclose()
    assert len(server.requests) == 1
