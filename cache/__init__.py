"""Result cache: answers to repeated deterministic requests, behind one small async interface.

The semantic cache's index (:class:`SemanticIndex`, faiss) and, for the Redis backend, the stream
that keeps every gateway's index in step (:class:`SemanticFeed`).

Backends: :class:`DiskStore` (diskcache in the data folder; the embedded default) and
:class:`RedisStore` (shared by several gateways).  The cache knows no tenant policy: what
may be cached and for whom is the gateway's business; keys come from
:func:`result_key`, which puts the tenant first.

:func:`redis_client` opens every Redis client of the gateway (cache, limits, shared state) under one
:class:`RedisPolicy`, so all of them lose Redis and find it again the same way.
"""

from pathlib import Path

from cache._buffered import BufferedWrites
from cache._config import CacheConfig, SemanticConfig
from cache._disk import DiskStore, sqlite_memory
from cache._entry import CachedAnswer, decode_answer, encode_answer
from cache._keys import canonical_request, content_hash, embedding_key, result_key
from cache._protocol import CacheError, ResultStore
from cache._redis import RedisStore
from cache._redis_client import RedisPolicy, redis_client
from cache._semantic import Entry, SemanticIndex
from cache._semantic_feed import START, SemanticFeed


def open_store(config: CacheConfig, data_path: Path, policy: RedisPolicy | None = None) -> ResultStore:
    """The backend ``config`` names (a Redis one connects as ``policy`` says); opening is lazy, so this
    never blocks or fails on I/O."""
    if config.backend == "redis":
        return RedisStore(
            config.redis_url, prefix=config.redis_prefix, timeout_s=config.redis_timeout_s, policy=policy
        )
    directory = Path(config.directory).expanduser() if config.directory else data_path / "cache" / "results"
    return DiskStore(
        directory, config.max_bytes, sqlite_memory(config.sqlite_cache_mib, config.sqlite_mmap_mib)
    )


__all__ = [
    "START",
    "BufferedWrites",
    "CacheConfig",
    "CacheError",
    "CachedAnswer",
    "DiskStore",
    "Entry",
    "RedisPolicy",
    "RedisStore",
    "ResultStore",
    "SemanticConfig",
    "SemanticFeed",
    "SemanticIndex",
    "canonical_request",
    "content_hash",
    "decode_answer",
    "embedding_key",
    "encode_answer",
    "open_store",
    "redis_client",
    "result_key",
    "sqlite_memory",
]
