"""Writes held and stored in batches (cache/_buffered.py) in front of both real backends, and the disk
store's reads on the event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

from cache import BufferedWrites, DiskStore, RedisStore, ResultStore
from tests.redis_server import RedisServer


@pytest.fixture(params=["disk", "redis"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, redis_server: RedisServer
) -> AsyncIterator[ResultStore]:
    s: ResultStore = (
        DiskStore(tmp_path / "cache", 1 << 20)
        if request.param == "disk"
        else RedisStore(redis_server.url, prefix=f"buffered-{time.monotonic_ns()}:", timeout_s=1)
    )
    yield s
    await s.aclose()


class Counting:
    """The store under the buffer, counting its writes (a real store does the work)."""

    def __init__(self, store: ResultStore) -> None:
        self.store = store
        self.writes: list[int] = []

    async def get(self, key: str) -> bytes | None:
        return await self.store.get(key)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self.set_many([(key, value)], ttl_s)

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        return await self.store.get_many(keys)

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        self.writes.append(len(items))
        await self.store.set_many(items, ttl_s)

    async def aclose(self) -> None:
        await self.store.aclose()


async def test_held_values_are_read_at_once_and_stored_together(store: ResultStore) -> None:
    counting = Counting(store)
    buffered = BufferedWrites(counting, delay_s=0.2)
    for i in range(10):
        await buffered.set_many([(f"k{i}", b"v%d" % i)], ttl_s=60)
    assert await buffered.get_many(["k3", "nope", "k9"]) == [b"v3", None, b"v9"]
    assert await buffered.get("k0") == b"v0"
    assert await store.get("k0") is None  # not written yet: held
    await asyncio.sleep(0.4)
    assert counting.writes == [10]  # one write for the ten requests
    assert await store.get_many(["k0", "k9"]) == [b"v0", b"v9"]  # what another gateway now finds


async def test_a_full_buffer_is_written_at_once_and_close_writes_the_rest(store: ResultStore) -> None:
    counting = Counting(store)
    buffered = BufferedWrites(counting, delay_s=60, max_pending=4)
    await buffered.set_many([(f"k{i}", b"x") for i in range(4)], ttl_s=60)
    await asyncio.sleep(0.05)
    assert counting.writes == [4]
    await buffered.set("last", b"y", ttl_s=60)
    assert await store.get("last") is None
    await buffered.aclose()
    assert await store.get("last") == b"y"


async def test_a_held_value_expires_and_is_stored_with_its_remaining_life(store: ResultStore) -> None:
    buffered = BufferedWrites(store, delay_s=0.1)
    await buffered.set("short", b"v", ttl_s=0.4)
    await asyncio.sleep(0.2)  # flushed with ~0.3 s left
    assert await store.get("short") == b"v"
    await asyncio.sleep(0.4)
    assert await buffered.get("short") is None
    await buffered.set("gone", b"v", ttl_s=0.05)
    await asyncio.sleep(0.08)
    assert await buffered.get("gone") is None  # expired while held, never written
    await buffered.flush()
    assert await store.get("gone") is None


async def test_disk_reads_on_the_loop_find_another_handles_writes(tmp_path: Path) -> None:
    """Two stores on one folder stand for two gateways sharing it: a committed write of one is found by
    the other's inline read (WAL: readers see every commit)."""
    writer, reader = DiskStore(tmp_path / "shared", 1 << 20), DiskStore(tmp_path / "shared", 1 << 20)
    await reader.set("opened", b"1", ttl_s=60)  # opens its handles
    assert await reader.get_many(["k"]) == [None]
    await writer.set_many([("k", b"from the other")], ttl_s=60)
    assert await reader.get_many(["k", "opened"]) == [b"from the other", b"1"]
    await writer.set("one", b"for a chat lookup", ttl_s=60)
    assert await reader.get("one") == b"for a chat lookup"  # get reads on the loop as well
    await writer.aclose()
    await reader.aclose()


class Stalled(Counting):
    """A store whose writes wait until released: a slow disk or a Redis that stopped answering."""

    def __init__(self, store: ResultStore) -> None:
        super().__init__(store)
        self.release = asyncio.Event()

    async def set_many(self, items: Sequence[tuple[str, bytes]], ttl_s: float) -> None:
        await self.release.wait()
        await super().set_many(items, ttl_s)


async def test_behind_a_stalled_write_the_buffer_stays_bounded(store: ResultStore) -> None:
    stalled = Stalled(store)
    buffered = BufferedWrites(stalled, delay_s=0.01, max_pending=8)
    await buffered.set_many([(f"first{i}", b"x") for i in range(8)], ttl_s=60)
    await asyncio.sleep(0.05)  # the first batch is being written (and stalls)
    for i in range(1000):
        await buffered.set(f"later{i}", b"y", ttl_s=60)
    assert buffered.dropped == 1000 - 8
    assert await buffered.get("later7") == b"y" and await buffered.get("later8") is None
    stalled.release.set()
    await buffered.aclose()
    assert stalled.writes == [8, 8]  # the stalled batch, then the 8 that waited; nothing more
    assert await store.get_many(["first0", "later7", "later8"]) == [b"x", b"y", None]
