"""Misbehaving clients: slow-loris (headers a byte at a time), idle connections, header floods.
None may hold up other clients; each is answered (408/431) and its connection closed."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import chat, start_cloud_gateway

HEADER_TIMEOUT_S = 1.5


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM() as fake:
        tables = (
            f"[http]\nheader_timeout_s = {HEADER_TIMEOUT_S}\nmax_headers = 50\nmax_header_bytes = 16384\n"
        )
        gateway = start_cloud_gateway(tmp_path_factory.mktemp("clients"), fake.url, tables=tables)
        yield gateway
        gateway.stop()


def _connect(gw: Gateway) -> socket.socket:
    host, port = gw.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_slow_loris_clients_do_not_block_others_and_are_cut_off(gw: Gateway) -> None:
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + (
        b"X-Filler: " + b"a" * 1000 + b"\r\n"
    )
    socks = [_connect(gw) for _ in range(20)]
    stop = threading.Event()

    def trickle() -> None:  # one byte per socket every 0.1 s: never a whole header block
        i = 0
        while not stop.is_set() and i < len(request):
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.send(request[i : i + 1])
            i += 1
            time.sleep(0.1)

    trickler = threading.Thread(target=trickle, daemon=True)
    opened = time.monotonic()
    trickler.start()
    try:
        # Others are served meanwhile.
        for _ in range(3):
            started = time.monotonic()
            assert chat(gw).status_code == 200
            assert httpx.get(f"{gw.url}/healthz").status_code == 200
            assert time.monotonic() - started < 10  # loose: the machine is shared
        # Each slow client is answered 408 and closed once its headers are late, though it keeps sending.
        answers = [_read_all(sock) for sock in socks]
        closed_after = time.monotonic() - opened
    finally:
        stop.set()
        trickler.join(5)
        for sock in socks:
            sock.close()
    assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers), answers[0][:200]
    assert b'"error"' in answers[0]
    assert closed_after < HEADER_TIMEOUT_S + 10  # the trickle alone would last ~110 s


def test_a_connection_that_sends_nothing_is_closed(gw: Gateway) -> None:
    sock = _connect(gw)
    with sock:
        started = time.monotonic()
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < HEADER_TIMEOUT_S + 10


def test_keep_alive_connections_still_serve_several_requests(gw: Gateway) -> None:
    with httpx.Client() as client:
        for _ in range(3):
            assert client.get(f"{gw.url}/healthz").status_code == 200
            time.sleep(HEADER_TIMEOUT_S / 2)  # total time beyond the header deadline is fine


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param([(f"X-Flood-{i}", "1") for i in range(500)], id="many"),
        pytest.param([("X-Huge", "a" * 100_000)], id="huge"),
        pytest.param([(f"X-Big-{i}", "b" * 4000) for i in range(10)], id="many-big"),
    ],
)
def test_header_floods_get_431_and_the_server_stays_up(gw: Gateway, headers: list[tuple[str, str]]) -> None:
    raw = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
    raw += b"".join(f"{k}: {v}\r\n".encode() for k, v in headers) + b"\r\n"
    with _connect(gw) as sock:
        with contextlib.suppress(OSError):  # the server may close before reading it all
            sock.sendall(raw)
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert httpx.get(f"{gw.url}/healthz").status_code == 200


def test_headers_within_the_limits_are_served(gw: Gateway) -> None:
    headers = {f"X-Ok-{i}": "v" * 100 for i in range(40)}
    assert httpx.get(f"{gw.url}/healthz", headers=headers).status_code == 200


def test_malformed_request_lines_get_400_and_the_server_stays_up(gw: Gateway) -> None:
    for raw in (
        b"\x00\xff\xfe garbage\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n",
    ):
        with _connect(gw) as sock:
            sock.sendall(raw)
            assert _read_all(sock).startswith(b"HTTP/1.1 400 ")
    assert httpx.get(f"{gw.url}/healthz").status_code == 200
