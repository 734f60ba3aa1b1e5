"""A hostile publisher on the shared-state channel (a real redis-server): malformed messages are
logged and skipped and the listener goes on; a membership message is checked as the admin API checks
its input; and no log line shows a Redis password."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import redis

from gateway.ops import logs
from gateway.ops.shared import Bus, SharedState, check_replica_urls
from router import BreakerBoard, BreakerConfig
from tests.conftest import free_port
from tests.fakes import FakeVLLM
from tests.faults._support import start_cloud_gateway
from tests.gateway.ops.test_shared import eventually
from tests.redis_server import start_redis
from tiers import ReplicaListener


class FakePool:
    """A pool that records the memberships it is given."""

    def __init__(self) -> None:
        self.members: list[list[str]] = []

    def replicas(self) -> list[dict[str, Any]]:
        return []

    def set_members(self, urls: Sequence[str]) -> None:
        self.members.append(list(urls))

    def drain(self, name: str) -> bool:
        return False

    def watch_replicas(self, listener: ReplicaListener) -> None:
        return None

    def apply_replica_state(self, url: str, *, healthy: bool, ejected_for_s: float, why: str) -> None:
        return None


@pytest.fixture
async def listening(redis_url: str) -> AsyncIterator[tuple[FakePool, redis.Redis, str]]:
    prefix = f"test:{free_port()}:"
    shared = SharedState(Bus(redis_url, prefix=prefix, instance="victim"), BreakerConfig())
    pool = FakePool()
    shared.attach(BreakerBoard(BreakerConfig()), pool)  # type: ignore[arg-type]
    await shared.start()
    client = redis.Redis.from_url(redis_url)
    yield pool, client, prefix
    client.close()
    await shared.aclose()


def members(urls: object, by: str = "attacker") -> bytes:
    return msgspec.json.encode({"kind": "members", "by": by, "urls": urls})


async def test_malformed_messages_are_skipped_and_the_listener_goes_on(
    listening: tuple[FakePool, redis.Redis, str], caplog: pytest.LogCaptureFixture
) -> None:
    pool, client, prefix = listening
    channel = prefix + "events"
    hostile = [
        b"not json",
        b"[1, 2, 3]",
        b'"a string"',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"kind": "members"}',
        b'{"kind": "members", "urls": "http://x"}',
        b'{"kind": "members", "urls": [1, 2]}',
        b'{"kind": "breaker", "tier": "cloud", "modality": "smell", "state": "open"}',
        b'{"kind": "replica", "url": "http://a:1"}',
        b'{"kind": "drain", "url": 7}',
        b"\xff\xfe",
        members(["file:///etc/passwd"]),
        members(["http://user:pw@10.0.0.5:8000"]),
        members(["http://10.0.0.5:8000\r\nX-Injected: 1"]),
        members(["http://10.0.0.5:99999"]),
        members(["http://ok:8000"] * 1000),
    ]
    with caplog.at_level(logging.WARNING, logger="gateway.ops.shared"):
        for message in hostile:
            client.publish(channel, message)
        client.publish(channel, members(["http://10.0.0.7:8000", "https://vllm.example:443/v1"], by="ops"))
        await eventually(lambda: bool(pool.members))
    assert pool.members == [["http://10.0.0.7:8000", "https://vllm.example:443/v1"]]  # only the good one
    skipped = [r for r in caplog.records if "skipped" in r.getMessage() or "ignored" in r.getMessage()]
    assert len(skipped) >= len(hostile) - 2  # each logged (a few kinds are dropped as not ours)
    assert not any("listener failed" in r.getMessage() for r in caplog.records)


async def test_a_malformed_stored_entry_does_not_stop_catching_up(redis_url: str) -> None:
    prefix = f"test:{free_port()}:"
    client = redis.Redis.from_url(redis_url)
    client.hset(prefix + "breaker", "cloud|image", b"{broken")
    client.hset(prefix + "replica", "x", b'{"url": "http://a:1", "healthy": "yes", "ejected_until": "soon"}')
    shared = SharedState(Bus(redis_url, prefix=prefix, instance="late"), BreakerConfig())
    pool = FakePool()
    shared.attach(BreakerBoard(BreakerConfig()), pool)  # type: ignore[arg-type]
    await shared.start()
    try:
        assert shared.bus.connected.is_set()  # caught up, past the bad entries
        client.publish(prefix + "events", members(["http://10.0.0.9:8000"], by="ops"))
        await eventually(lambda: pool.members == [["http://10.0.0.9:8000"]])
    finally:
        client.close()
        await shared.aclose()


@pytest.mark.parametrize(
    "urls",
    [["ftp://h"], ["http://"], ["http://a b"], ["http://u:p@h"], "http://h", [1], ["http://h:0x50"]],
)
def test_replica_urls_are_checked(urls: object) -> None:
    with pytest.raises(ValueError):
        check_replica_urls(urls)


def test_redis_passwords_never_reach_a_log_line() -> None:
    for fmt in ("json", "text"):
        out = io.StringIO()
        logger = logging.getLogger(f"test.redact.{fmt}")
        logger.propagate = False
        logger.addHandler(logs.handler(fmt, out))  # type: ignore[arg-type]
        try:
            logger.warning("redis at %s: refused", "redis://:hunter2@10.0.0.2:6379/0")
            try:
                raise ConnectionError(
                    "cannot reach rediss://cache:hunter2@cache.internal:6380/1?password=hunter2"
                )
            except ConnectionError:
                logger.exception("cache failed")
        finally:
            logger.handlers.clear()
        text = out.getvalue()
        assert "hunter2" not in text and "redis://:***@10.0.0.2:6379/0" in text, text
        assert "rediss://cache:***@cache.internal" in text


def test_a_redis_with_a_password_serves_limits_cache_and_shared_state_and_the_password_is_never_logged(
    tmp_path: Path,
) -> None:
    """Authentication for Redis is the URL's (``redis://:password@host:port/db``; ``rediss://`` for TLS,
    as redis-py reads them): one password-protected server behind the cache, the limits and the shared
    state, and the password appears in no log line."""
    secret = "s3cret-redis-password"
    server = start_redis(tmp_path / "redis", free_port(), password=secret)
    url = f"redis://:{secret}@127.0.0.1:{server.port}/0"
    try:
        with FakeVLLM() as fake:
            tables = (
                f'[cache]\nbackend = "redis"\nredis_url = "{url}"\n[limits]\nredis_url = "{url}"\n'
                f'[shared]\nredis_url = "{url}"\n'
            )
            (tmp_path / "gw").mkdir()
            gw = start_cloud_gateway(tmp_path / "gw", fake.url, tables=tables)
            try:
                body = {
                    "model": "cloud",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 4,
                    "temperature": 0,
                }
                first = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=gw.auth, timeout=30)
                again = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=gw.auth, timeout=30)
                assert first.status_code == again.status_code == 200
                assert again.headers["X-Tiergate-Cache"] == "hit"  # the cache is on that Redis
            finally:
                gw.stop()
            assert secret not in gw.log()
    finally:
        server.stop()
