"""Typed configuration of the result cache."""

from __future__ import annotations

from typing import Literal

import msgspec

DEFAULT_TTL_S = 3600.0
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_ENTRY_BYTES = 1024 * 1024


class SemanticConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The semantic cache's index (``[cache.semantic]``); whether a tenant uses it is its policy's
    ``semantic_cache``.  Entries live as long as the exact cache's ``ttl_s``."""

    # Entries in the in-process index, all tenants together, and for one tenant (oldest go first).
    max_entries: int = 50_000  # 1.5 KB of float32 each: 75 MB at most
    max_entries_per_tenant: int = 10_000
    # Nearest entries of the tenant read per lookup before those of another context are skipped.
    candidates: int = 16
    # Disk backend: the index is saved in <data_dir>/cache/semantic this often (and at close).
    save_interval_s: float = 60.0
    # Redis backend: the stream every gateway appends its entries to and follows.
    redis_stream: str = "tiergate:semantic"


class CacheConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where answers are kept and for how long.

    ``backend = "disk"`` keeps them in ``directory`` (empty: ``<data_dir>/cache/results``) with
    diskcache, bounded by ``max_bytes`` (least recently stored go first); ``"redis"`` shares
    them between gateways through ``redis_url`` (bound its memory with Redis' own ``maxmemory``).
    """

    enabled: bool = True
    backend: Literal["disk", "redis"] = "disk"
    ttl_s: float = DEFAULT_TTL_S
    max_bytes: int = DEFAULT_MAX_BYTES
    # Answers larger than this are not stored.
    max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES
    # Cache only requests whose answer is reproducible: temperature 0 or a seed given.
    only_deterministic: bool = True
    directory: str = ""
    # Disk backend: each SQLite connection's page cache and memory map, in MiB.  diskcache's own
    # defaults (32 MiB of pages and a 64 MiB map a connection, two connections) let the gateway's RSS
    # grow by ~200 MiB as the database fills; these bound what the cache holds in memory to 2 x
    # (cache + map).  A read that misses the page cache is a ~0.02 ms read from the OS's file cache.
    sqlite_cache_mib: int = 4
    sqlite_mmap_mib: int = 0
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "tiergate:result:"
    # Seconds a Redis call may take before the cache is treated as missing (never fails a request).
    redis_timeout_s: float = 0.5
    semantic: SemanticConfig = msgspec.field(default_factory=SemanticConfig)
