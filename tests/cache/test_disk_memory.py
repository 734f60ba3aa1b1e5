"""The disk backend's SQLite memory is what ``[cache] sqlite_cache_mib`` and ``sqlite_mmap_mib`` say
(issue 43: diskcache's own 32 MiB page cache and 64 MiB map per connection grew the gateway's RSS as
embedding vectors were stored)."""

from __future__ import annotations

from pathlib import Path

from cache import CacheConfig, DiskStore, open_store


def pragma(store: DiskStore, name: str, reader: bool = False) -> int:
    handle = store._reader if reader else store._cache
    assert handle is not None
    return int(handle._sql(f"PRAGMA {name}").fetchone()[0])


async def test_both_connections_take_the_configured_page_cache_and_map(tmp_path: Path) -> None:
    config = CacheConfig(directory=str(tmp_path / "c"), sqlite_cache_mib=3, sqlite_mmap_mib=1)
    store = open_store(config, tmp_path)
    assert isinstance(store, DiskStore)
    await store.set("k", b"v" * 1000, ttl_s=60)
    assert await store.get("k") == b"v" * 1000  # read on the loop: the reader's connection
    for reader in (False, True):
        if reader:
            assert pragma(store, "cache_size", reader) == -3 * 1024  # KiB, whatever the page size
            assert pragma(store, "mmap_size", reader) == 1 << 20
        else:  # the writer's connection belongs to its thread: asked there
            cache_size = await store._run(pragma, store, "cache_size")
            mmap_size = await store._run(pragma, store, "mmap_size")
            assert (cache_size, mmap_size) == (-3 * 1024, 1 << 20)
    await store.aclose()


async def test_the_defaults_are_4_mib_of_pages_and_no_map(tmp_path: Path) -> None:
    store = open_store(CacheConfig(directory=str(tmp_path / "c")), tmp_path)
    assert isinstance(store, DiskStore)
    await store.set("k", b"v", ttl_s=60)
    await store.get("k")
    assert (pragma(store, "cache_size", True), pragma(store, "mmap_size", True)) == (-4096, 0)
    await store.aclose()
