"""Hostile request bodies and headers against a real gateway: oversized and deeply nested JSON,
invalid UTF-8, absurd numbers, streamed bodies without a length. Each gets a fast 4xx in OpenAI's
error shape and the gateway stays up; none is a 500."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Gateway
from tests.hostile.conftest import MAX_BODY_BYTES

CHAT = "/v1/chat/completions"


def post(gw: Gateway, body: bytes | Iterator[bytes], headers: dict[str, str] | None = None) -> httpx.Response:
    headers = {**gw.auth, "Content-Type": "application/json", **(headers or {})}
    return httpx.post(f"{gw.url}{CHAT}", content=body, headers=headers, timeout=30)


def assert_error(resp: httpx.Response, status: int) -> dict[str, object]:
    assert resp.status_code == status, resp.text[:500]
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return dict(error)


def nested(depth: int, opener: bytes = b"[", closer: bytes = b"]") -> bytes:
    return opener * depth + closer * depth


@pytest.fixture(autouse=True)
def still_up(target: Gateway) -> Iterator[None]:
    yield
    assert httpx.get(f"{target.url}/healthz").status_code == 200
    assert target.process.poll() is None


def test_a_body_over_the_limit_is_413_fast(target: Gateway) -> None:
    body = (
        b'{"model": "cloud", "messages": [{"role": "user", "content": "'
        + b"a" * (4 * MAX_BODY_BYTES)
        + b'"}]}'
    )
    started = time.monotonic()
    error = assert_error(post(target, body), 413)
    assert "max_body_bytes" in str(error["message"])
    assert time.monotonic() - started < 10


def test_a_streamed_body_without_a_length_is_cut_off_at_the_limit(target: Gateway) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "cloud", "messages": [{"role": "user", "content": "'
        for _ in range(4 * MAX_BODY_BYTES // 65536):
            yield b"a" * 65536

    assert_error(post(target, chunks()), 413)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"model": "cloud", "messages": ' + nested(100_000) + b"}", id="messages"),
        pytest.param(
            b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "x": '
            + nested(200_000)
            + b"}",
            id="unknown-field-arrays",
        ),
        pytest.param(
            b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "x": '
            + b'{"a":' * 150_000
            + b"1"
            + b"}" * 150_000
            + b"}",
            id="unknown-field-objects",
        ),
        pytest.param(nested(400_000, b"{", b"}"), id="top-level"),
        pytest.param(nested(1_000), id="shallow-but-too-deep"),
    ],
)
def test_deeply_nested_json_is_400_not_a_recursion_crash(target: Gateway, body: bytes) -> None:
    assert len(body) < MAX_BODY_BYTES
    started = time.monotonic()
    assert_error(post(target, body), 400)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(
            b'{"model": "cloud", "messages": [{"role": "user", "content": "\xff\xfe\xfd"}]}', id="content"
        ),
        pytest.param(
            b'{"model": "cl\xc3oud", "messages": [{"role": "user", "content": "hi"}]}', id="truncated-seq"
        ),
        pytest.param(
            b'{"model": "cloud", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', id="surrogate"
        ),
        pytest.param(
            b'{"model": "cloud", "messages": [{"role": "user", "content": "\\ud800"}]}', id="lone-escape"
        ),
        pytest.param(b"\xef\xbb\xbf\x00\x00\x00", id="bom-nul"),
    ],
)
def test_invalid_utf8_and_unicode_are_rejected_or_served_never_500(target: Gateway, body: bytes) -> None:
    resp = post(target, body)
    assert resp.status_code in (200, 400), resp.text
    if resp.status_code == 400:
        assert_error(resp, 400)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"null",
        b"[]",
        b'"a string"',
        b"{}",
        b'{"model": "cloud", "messages": []}',
        b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1e400}',
        b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 123456789012345678901234567890}',
        b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "temperature": NaN}',
        b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "seed": -99999999999999999999999}',
        b'{"model": "cloud", "messages": [{"role": "robot", "content": "hi"}]}',
        b'{"model": "cloud", "messages": [{"role": "user", "content": [{"type": "nope"}]}]}',
        b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}]',
        b'{"model": 1e999999, "messages": 0}',
    ],
)
def test_malformed_bodies_are_400_in_openai_shape(target: Gateway, body: bytes) -> None:
    assert_error(post(target, body), 400)


def test_many_messages_within_the_limit_are_answered(target: Gateway) -> None:
    messages = b",".join([b'{"role": "user", "content": "hi"}'] * 20_000)
    body = b'{"model": "tiergate-auto", "messages": [' + messages + b'], "max_tokens": 4}'
    assert len(body) < MAX_BODY_BYTES
    started = time.monotonic()
    resp = post(target, body)
    assert resp.status_code in (200, 400), resp.text[:300]  # served, or too long for every tier
    assert time.monotonic() - started < 20


@pytest.mark.parametrize(
    "auth",
    [b"Bearer \xff\xfe", b"Bearer " + b"a" * 8000, b"\x00\x01", b"Bearer tg_" + b"0" * 16 + b"_\xc3"],
)
def test_odd_bytes_in_the_authorization_header_are_401(target: Gateway, auth: bytes) -> None:
    host, port = target.url.removeprefix("http://").split(":")
    body = b'{"model": "cloud", "messages": [{"role": "user", "content": "hi"}]}'
    raw = (
        b"POST " + CHAT.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Authorization: " + auth + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
        b"Connection: close\r\n\r\n" + body
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith((b"HTTP/1.1 401 ", b"HTTP/1.1 400 ")), answer[:300]
    assert b'"error"' in answer
