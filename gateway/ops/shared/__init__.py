"""State shared by several gateway instances through Redis (``shared.redis_url``): circuit breakers,
the cloud pool's replica health and membership, configuration reloads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.ops.shared._bus import Bus, instance_name, publish_now
from gateway.ops.shared._state import RELOAD, SharedPool, SharedState, check_replica_urls

if TYPE_CHECKING:
    from gateway.settings import Settings

__all__ = ["RELOAD", "Bus", "SharedPool", "SharedState", "check_replica_urls", "open_shared", "publish_now"]


def open_shared(settings: Settings) -> SharedState | None:
    """The shared state when ``shared.redis_url`` is set, else None (everything in this process)."""
    shared = settings.shared
    if not shared.redis_url:
        return None
    bus = Bus(shared.redis_url, prefix=shared.prefix, instance=instance_name(shared.instance))
    return SharedState(bus, settings.breakers)
