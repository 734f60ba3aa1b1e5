"""State shared by several gateway instances through Redis (``shared.redis_url``): circuit breakers,
the cloud pool's replica health and membership, configuration reloads."""

from __future__ import annotations

import msgspec

import cache
from gateway.ops.shared._bus import Bus, instance_name, publish_now
from gateway.ops.shared._state import RELOAD, SharedPool, SharedState, check_replica_urls, pool_reloader
from router import BreakerConfig

__all__ = [
    "RELOAD",
    "Bus",
    "SharedPool",
    "SharedSettings",
    "SharedState",
    "check_replica_urls",
    "open_shared",
    "pool_reloader",
    "publish_now",
]


class SharedSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """State several gateway instances share (the cache, limits and database have their own URLs)."""

    # Empty: breaker states, replica health and config changes stay in this process. A redis:// URL:
    # every gateway on it sees them (a breaker one opens is open in all; a reload reaches all).
    redis_url: str = ""
    prefix: str = "tiergate:shared:"
    # This gateway's name in what it shares; empty: <hostname>-<pid>.
    instance: str = ""


def open_shared(
    shared: SharedSettings, breakers: BreakerConfig, policy: cache.RedisPolicy | None = None
) -> SharedState | None:
    """The shared state when ``shared.redis_url`` is set (connected as ``policy`` says), else None
    (everything in this process)."""
    if not shared.redis_url:
        return None
    bus = Bus(shared.redis_url, prefix=shared.prefix, instance=instance_name(shared.instance), policy=policy)
    return SharedState(bus, breakers)
