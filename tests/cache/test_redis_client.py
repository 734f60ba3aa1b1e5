"""The one Redis connection policy (cache/_redis_client.py) against a real redis-server that is killed
and started again on its port: pooled connections broken by the outage are replaced on their next use,
a script the restarted server forgot is loaded again, a burst past the pool's bound waits instead of
failing, an idle connection is PINGed before it is used, and one left half-open (its path went away
without a close, as through a NAT or a container network) is found and replaced on its next use."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import msgspec
import pytest
import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import cache
from gateway.accounts.tenants import Demand, RedisLimiter, Tenant, TenantLimits
from gateway.settings import Settings
from tests.conftest import free_port
from tests.redis_server import RedisServer, start_redis


@pytest.fixture
def server(tmp_path: Path) -> RedisServer:
    return start_redis(tmp_path / "redis", free_port())


def restart(server: RedisServer, tmp_path: Path) -> RedisServer:
    """SIGKILL, then a new empty server on the same port (no script, no key kept)."""
    server.process.kill()
    server.process.wait(10)
    return start_redis(tmp_path / "redis", server.port)


async def test_connections_broken_by_a_restart_are_replaced_on_their_next_use(
    server: RedisServer, tmp_path: Path
) -> None:
    client = cache.redis_client(server.url, cache.RedisPolicy(), timeout_s=1.0)
    try:
        await asyncio.gather(*(client.set(f"k{i}", i) for i in range(40)))  # 40 pooled connections
        server = restart(server, tmp_path)
        # Each of them is broken; every call still succeeds, the first time.
        assert await asyncio.gather(*(client.incr(f"n{i}") for i in range(40))) == [1] * 40
    finally:
        await client.aclose()
        server.stop()


async def test_the_limiter_counts_in_redis_again_at_once_and_reloads_its_script(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    limiter = RedisLimiter(server.url, prefix="heal")
    tenant = Tenant(id=1, name="t", created_at=0.0, limits=TenantLimits(requests_per_min=1000))
    try:
        await asyncio.gather(*(limiter.admit(tenant, Demand()) for _ in range(20)))
        server = restart(server, tmp_path)  # empty: the script cache too (NOSCRIPT)
        with caplog.at_level(logging.WARNING, logger="gateway.accounts.tenants"):
            await asyncio.gather(*(limiter.admit(tenant, Demand()) for _ in range(20)))
        assert not caplog.records  # none counted in this process
        direct = redis.Redis.from_url(server.url)
        assert sum(int(direct.get(k) or 0) for k in direct.keys("heal:1:*:requests")) == 20
        direct.close()
    finally:
        await limiter.aclose()
        server.stop()


async def test_a_burst_past_the_pool_bound_waits_for_a_connection(server: RedisServer) -> None:
    client = cache.redis_client(server.url, cache.RedisPolicy(max_connections=4), timeout_s=2.0)
    try:
        counts = await asyncio.gather(*(client.incr("burst") for _ in range(300)))
        assert sorted(counts) == list(range(1, 301))  # every one counted once, none failed
        assert len(client.connection_pool._available_connections) <= 4  # type: ignore[attr-defined]
    finally:
        await client.aclose()
        server.stop()


async def test_an_idle_connection_is_pinged_before_use(server: RedisServer) -> None:
    client = cache.redis_client(server.url, cache.RedisPolicy(health_check_s=0.2), timeout_s=1.0)
    direct = redis.Redis.from_url(server.url)

    def pings() -> int:
        return int(direct.info("commandstats").get("cmdstat_ping", {}).get("calls", 0))

    try:
        await client.set("k", 1)  # a new connection (checked once as it is made)
        busy = pings()
        await client.get("k")
        assert pings() == busy  # used again within the interval: no PING
        await asyncio.sleep(0.4)
        await client.get("k")
        assert pings() == busy + 1
    finally:
        await client.aclose()
        direct.close()
        server.stop()


class SilencingProxy:
    """A TCP proxy to Redis whose connections can be silenced: bytes are swallowed both ways and
    nothing is closed, so the client's sockets stay open on a path that has gone (half-open).
    Connections made afterwards are forwarded as usual."""

    def __init__(self, upstream_port: int) -> None:
        self.port = free_port()
        self._upstream_port = upstream_port
        self._links: list[list[bool]] = []  # one [silenced] per connection
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream_port)
        silenced = [False]
        self._links.append(silenced)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(65536):
                if not silenced[0]:
                    dst.write(data)
                    await dst.drain()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)

    def silence(self) -> None:
        for link in self._links:
            link[0] = True

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.mark.parametrize("retries", [1, 0])
async def test_a_half_open_connection_is_found_and_replaced(server: RedisServer, retries: int) -> None:
    proxy = SilencingProxy(server.port)
    await proxy.start()
    policy = cache.RedisPolicy(health_check_s=0.2, retries=retries)
    client = cache.redis_client(f"redis://127.0.0.1:{proxy.port}/0", policy, timeout_s=0.3)
    try:
        await client.set("k", b"v")
        proxy.silence()  # the pooled connection now leads nowhere, and nothing tells the client
        await asyncio.sleep(0.3)  # idle past the health check: the PING meets it, and times out
        if retries:
            assert await client.get("k") == b"v"  # sent again on a fresh connection
        else:
            with pytest.raises(RedisTimeoutError):  # without the retry, this call is lost
                await client.get("k")
    finally:
        await client.aclose()
        await proxy.aclose()
        server.stop()


async def test_a_redis_that_is_away_fails_the_call_after_one_retry() -> None:
    client = cache.redis_client(f"redis://127.0.0.1:{free_port()}/0", cache.RedisPolicy(), timeout_s=0.5)
    try:
        with pytest.raises(RedisConnectionError):
            await client.get("k")
    finally:
        await client.aclose()


def test_the_policy_is_one_settings_table() -> None:
    settings = msgspec.toml.decode(b"[redis]\nhealth_check_s = 1.5\nretries = 2\n", type=Settings)
    assert settings.redis == cache.RedisPolicy(health_check_s=1.5, retries=2)
    with pytest.raises(msgspec.ValidationError, match="max_connections"):
        msgspec.toml.decode(b"[redis]\nmax_connections = 0\n", type=Settings)
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.toml.decode(b"[redis]\nretry_forever = true\n", type=Settings)
