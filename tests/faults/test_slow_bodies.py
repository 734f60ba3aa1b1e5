"""Clients that trickle request bodies, against a real `tiergate serve` on loopback: each gets 408
and its connection closed once its body is slower than the minimum rate or later than the deadline,
on every route (/admin/login too), while other clients are served."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import chat, start_cloud_gateway

BODY_TIMEOUT_S, GRACE_S, MIN_RATE = 4.0, 1.0, 200


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM() as fake:
        tables = (
            f"[http]\nbody_timeout_s = {BODY_TIMEOUT_S}\nbody_grace_s = {GRACE_S}\n"
            f"min_body_bytes_per_s = {MIN_RATE}\n"
        )
        gateway = start_cloud_gateway(tmp_path_factory.mktemp("bodies"), fake.url, tables=tables)
        yield gateway
        gateway.stop()


def trickle(gw: Gateway, path: str, length: int, chunk: bytes, every_s: float) -> tuple[bytes, float]:
    """Send a request's headers, then its body ``chunk`` by ``chunk``; (the answer, seconds to it)."""
    host, port = gw.url.removeprefix("http://").split(":")
    kind = "application/x-www-form-urlencoded" if path == "/admin/login" else "application/json"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {kind}\r\n"
        f"Authorization: {gw.auth['Authorization']}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head)
        sent = 0
        answer = b""
        sock.settimeout(every_s)
        while sent < length and time.monotonic() - started < 30:
            with contextlib.suppress(OSError):
                sock.send(chunk)
                sent += len(chunk)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                break
            if not data:
                break
            answer += data
        sock.settimeout(10)
        with contextlib.suppress(OSError):
            while data := sock.recv(65536):
                answer += data
    return answer, time.monotonic() - started


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/admin/login", "/admin/api/tenants"])
def test_a_body_slower_than_the_minimum_rate_is_408_and_closed(gw: Gateway, path: str) -> None:
    answer, took = trickle(gw, path, 10_000, b"a", 0.2)  # 5 bytes/s
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b"slower than" in answer and b"connection: close" in answer.lower()
    assert took < GRACE_S + 3


def test_a_body_later_than_the_deadline_is_408_even_at_a_fair_rate(gw: Gateway) -> None:
    answer, took = trickle(gw, "/v1/chat/completions", 100_000, b"a" * 120, 0.4)  # 300 bytes/s
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b"did not arrive within" in answer
    assert BODY_TIMEOUT_S - 1 < took < BODY_TIMEOUT_S + 3


def _rss_kib(gw: Gateway) -> int:
    status = Path(f"/proc/{gw.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_trickling_clients_do_not_stop_others(gw: Gateway) -> None:
    """30 clients each promising a large body and sending a byte at a time: others are served at once,
    every trickler is cut off, and the gateway's memory does not grow with them."""
    assert chat(gw).status_code == 200
    before = _rss_kib(gw)
    threads = [
        threading.Thread(
            target=trickle, args=(gw, "/v1/chat/completions", 10_000_000, b"a", 0.2), daemon=True
        )
        for _ in range(30)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    started = time.monotonic()
    assert chat(gw).status_code == 200 and time.monotonic() - started < 5
    peak = _rss_kib(gw)
    for thread in threads:
        thread.join(15)
    assert not any(t.is_alive() for t in threads)  # every one was cut off
    assert peak - before < 32 * 1024  # KiB: the promised 300 MB are never buffered
    assert chat(gw).status_code == 200


def test_a_normal_body_is_served(gw: Gateway) -> None:
    body = b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}'
    resp = httpx.post(
        f"{gw.url}/v1/chat/completions",
        content=body,
        headers={**gw.auth, "Content-Type": "application/json"},
        timeout=30,
    )
    assert resp.status_code == 200
