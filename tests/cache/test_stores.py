"""Both backends behind the one interface; Redis is a real redis-server on a loopback port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cache import CacheError, DiskStore, RedisStore, ResultStore
from tests.redis_server import RedisServer


@pytest.fixture(params=["disk", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer):
    s: ResultStore = (
        DiskStore(tmp_path / "cache", 1 << 20)
        if request.param == "disk"
        else RedisStore(redis_server.url, prefix="test:", timeout_s=1)
    )
    yield s
    await s.aclose()


async def test_set_get_and_ttl(store: ResultStore) -> None:
    assert await store.get("k") is None
    await store.set("k", b"value", ttl_s=60)
    assert await store.get("k") == b"value"
    await store.set("short", b"v", ttl_s=0.2)
    await asyncio.sleep(0.4)
    assert await store.get("short") is None


async def test_many_at_once(store: ResultStore) -> None:
    assert await store.get_many([]) == []
    await store.set_many([("a", b"1"), ("b", b"2")], ttl_s=60)
    assert await store.get_many(["a", "missing", "b"]) == [b"1", None, b"2"]
    await store.set_many([("short", b"v")], ttl_s=0.2)
    await asyncio.sleep(0.4)
    assert await store.get_many(["short", "a"]) == [None, b"1"]


async def test_unreachable_redis_is_a_cache_error_not_a_hang(tmp_path: Path) -> None:
    from tests.conftest import free_port

    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0", prefix="x:", timeout_s=0.2)
    with pytest.raises(CacheError):
        await store.get("k")
    await store.aclose()


async def test_disk_store_respects_its_size_bound(tmp_path: Path) -> None:
    store = DiskStore(tmp_path / "small", max_bytes=256 * 1024)
    for i in range(64):
        await store.set(f"k{i}", bytes(8 * 1024), ttl_s=60)
    kept = [i for i in range(64) if await store.get(f"k{i}") is not None]
    assert len(kept) < 64
    assert 63 in kept  # the newest survive
    await store.aclose()
