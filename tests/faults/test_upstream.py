"""Upstream faults through a real gateway: a vLLM killed mid-stream, one that hangs after its
headers, connections reset, and a client that leaves mid-stream (the upstream request is cancelled)."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import HELLO, FakeProcess, chat, start_cloud_gateway


def _cloud(gw: Gateway) -> dict[str, object]:
    return next(t for t in gw.readyz()["tiers"] if t["name"] == "cloud")


def test_upstream_killed_mid_stream_ends_the_stream_with_an_error_then_recovers(tmp_path: Path) -> None:
    fake = FakeProcess("slow_stream", tmp_path / "fake.log")
    fake.start()
    gw = start_cloud_gateway(tmp_path, fake.url)
    try:
        received: list[str] = []
        stream = gw.client().chat.completions.create(
            model="cloud", messages=HELLO, max_tokens=50, stream=True
        )
        with pytest.raises(openai.APIError) as caught:
            for chunk in stream:
                received.extend(c.delta.content or "" for c in chunk.choices)
                if len(received) == 3:
                    fake.kill()  # SIGKILL: the connection dies with the process
        assert "".join(received).startswith("piece 0 piece 1 ")
        assert "cloud" in caught.value.message
        # The gateway is up, sees the replica gone, and serves again once it is back on its port.
        assert httpx.get(f"{gw.url}/healthz").status_code == 200
        gw.wait(lambda: _cloud(gw)["health"] == "down", 15, "the cloud to be seen down")
        down = chat(gw)
        assert down.status_code == 503 and down.json()["error"]["type"] == "service_unavailable"
        fake.start()
        gw.wait(lambda: _cloud(gw)["health"] == "ready", 15, "the cloud to come back")
        assert chat(gw, stream=False).status_code == 200
    finally:
        gw.stop()
        fake.kill()


@pytest.mark.parametrize("stream", [False, True])
def test_upstream_hanging_after_headers_is_answered_within_the_timeout(tmp_path: Path, stream: bool) -> None:
    with FakeVLLM("hang_after_headers") as fake:
        gw = start_cloud_gateway(tmp_path, fake.url, "[cloud.timeouts]\nfirst_byte_s = 1.0\n")
        try:
            started = time.monotonic()
            resp = chat(gw, stream=stream)
            elapsed = time.monotonic() - started
            assert resp.status_code == 503, resp.text
            error = resp.json()["error"]
            assert error["type"] == "service_unavailable"
            assert "did not answer in time" in error["message"]
            assert elapsed < 20  # the 1 s deadline, not the client's 30 s: loose for a busy machine
            # The hung upstream request was given up (its connection closed), not left behind.
            gw.wait(lambda: fake.disconnects == 1, 10, "the upstream connection to be closed")
            assert _cloud(gw)["instances"][0]["in_flight"] == 0  # type: ignore[index]
        finally:
            gw.stop()


def test_a_hanging_upstream_does_not_hold_up_other_clients(tmp_path: Path) -> None:
    with FakeVLLM("hang_after_headers") as fake:
        gw = start_cloud_gateway(tmp_path, fake.url, "[cloud.timeouts]\nfirst_byte_s = 12.0\n")
        try:
            finished: list[tuple[int, float]] = []
            hung = threading.Thread(target=lambda: finished.append((chat(gw).status_code, time.monotonic())))
            hung.start()
            gw.wait(lambda: _cloud(gw)["in_flight"] == 1, 10, "the hanging request")
            with httpx.Client(timeout=30) as client:
                for _ in range(5):
                    assert client.get(f"{gw.url}/healthz").status_code == 200
                    assert client.get(f"{gw.url}/v1/models", headers=gw.auth).status_code == 200
            fake.mode = "ok"  # later requests are answered while the first still hangs
            assert chat(gw).status_code == 200
            others_done = time.monotonic()
            hung.join(30)
            assert finished and finished[0][0] == 503  # it timed out as configured
            assert finished[0][1] > others_done  # after the others were all served
        finally:
            gw.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_connection_reset_before_the_first_byte_is_a_clear_503(tmp_path: Path, stream: bool) -> None:
    with FakeVLLM("reset") as fake:
        gw = start_cloud_gateway(tmp_path, fake.url)
        try:
            for _ in range(3):
                resp = chat(gw, stream=stream)
                assert resp.status_code == 503, resp.text
                assert resp.json()["error"]["message"].startswith("the cloud tier is unavailable")
            assert len(fake.requests) == 3
            fake.mode = "ok"
            assert chat(gw, stream=stream).status_code == 200
        finally:
            gw.stop()


def test_upstream_stalling_mid_stream_ends_the_stream_within_the_timeout(tmp_path: Path) -> None:
    with FakeVLLM("slow_stream", delay_s=30, stream_chunks=3) as fake:
        gw = start_cloud_gateway(tmp_path, fake.url, "[cloud.timeouts]\nfirst_byte_s = 1.0\n")
        try:
            started = time.monotonic()
            resp = chat(gw, stream=True)
            assert resp.status_code == 200
            events = [line for line in resp.text.splitlines() if line.startswith("data:")]
            assert (
                "piece 0" in events[1] and '"error"' in events[-1] and "did not answer in time" in events[-1]
            )
            assert "[DONE]" not in resp.text
            assert time.monotonic() - started < 20  # not the 30 s stall
            gw.wait(lambda: fake.disconnects == 1, 10, "the stalled upstream request to be dropped")
        finally:
            gw.stop()


def _client_leaves(gw: Gateway, how: str) -> None:
    """Start a long stream, read its first pieces, then leave: close (FIN) or reset (RST)."""
    host, port = gw.url.removeprefix("http://").split(":")
    body = json.dumps({"model": "cloud", "messages": HELLO, "max_tokens": 500, "stream": True}).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: {gw.auth['Authorization']}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(head.encode() + body)
    seen = b""
    while b"piece 1" not in seen:
        seen += sock.recv(65536)
    assert seen.startswith(b"HTTP/1.1 200 ")
    if how == "reset":
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@pytest.mark.parametrize("how", ["close", "reset"])
def test_client_leaving_mid_stream_cancels_the_upstream_request(tmp_path: Path, how: str) -> None:
    with FakeVLLM("slow_stream", delay_s=0.1, stream_chunks=300) as fake:
        gw = start_cloud_gateway(tmp_path, fake.url)
        try:
            _client_leaves(gw, how)
            # The client is gone after ~0.2 s of a 30 s answer: the gateway must drop the upstream too.
            gw.wait(lambda: fake.disconnects == 1, 10, "the fake to see the request cancelled")
            gw.wait(lambda: _cloud(gw)["in_flight"] == 0, 5, "the replica's in-flight count to drop")
            assert chat(gw).status_code == 200  # and the replica still serves
        finally:
            gw.stop()


def test_a_long_whole_answer_is_not_a_replica_failure(tmp_path: Path) -> None:
    """vLLM sends a non-streamed answer's headers only when it is done: a generation longer than
    first_byte_s is answered (within total_s), and one longer than total_s is a 503 that ejects no
    replica and is not retried on the others."""
    with FakeVLLM("slow", delay_s=2.5) as fake:
        gw = start_cloud_gateway(tmp_path, fake.url, "[cloud.timeouts]\nfirst_byte_s = 1.0\ntotal_s = 6.0\n")
        try:
            assert chat(gw).status_code == 200  # 2.5 s > first_byte_s, < total_s
            fake.delay_s = 10.0
            resp = chat(gw)
            assert resp.status_code == 503 and "did not answer in time" in resp.text
            assert len(fake.requests) == 2  # not retried
            fake.delay_s = 0.0
            assert chat(gw).status_code == 200  # the replica was not ejected
            assert _cloud(gw)["instances"][0]["healthy"]  # type: ignore[index]
        finally:
            gw.stop()
