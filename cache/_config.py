"""Typed configuration of the result cache."""

from __future__ import annotations

from typing import Literal

import msgspec

DEFAULT_TTL_S = 3600.0
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
DEFAULT_MAX_ENTRY_BYTES = 1024 * 1024


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
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "tiergate:result:"
    # Seconds a Redis call may take before the cache is treated as missing (never fails a request).
    redis_timeout_s: float = 0.5
