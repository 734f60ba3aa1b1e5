"""State several gateway instances keep in step through the :class:`~gateway.ops.shared._bus.Bus`:

- circuit breakers: one that opens (or closes after a good probe) in one instance does in all; an
  instance that starts takes the breakers still open;
- the cloud pool's replicas: an ejection, or a failed health check, seen by one is taken by all
  (a recovery each instance confirms with its own check);
- configuration: a reload (SIGHUP) of one instance makes every instance re-read its settings; the
  pool's membership set through one instance's admin API is set in all.

The result cache and rate limits share through Redis on their own (``cache.backend``,
``limits.redis_url``); tenants, keys, prices and the ledger through the database.

Anything that can publish on the channel is not trusted more than an admin request: a membership
message's URLs are checked as the admin API checks them (:func:`check_replica_urls`), and a message
that is malformed or fails its check is logged and skipped (the listener goes on).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import router
from gateway.ops.shared._bus import Bus
from tiers import Modality, Pool, SharedReplicas

log = logging.getLogger(__name__)

BREAKER, REPLICA, RELOAD, MEMBERS, DRAIN = "breaker", "replica", "reload", "members", "drain"
# A stored failed health check older than this is not taken by an instance that starts.
STALE_HEALTH_S = 10.0
MAX_REPLICAS = 256
MAX_URL_CHARS = 2048
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")


def check_replica_urls(urls: object) -> list[str]:
    """``urls`` as a list of cloud replica URLs, or ValueError saying what is wrong: a list of at
    most :data:`MAX_REPLICAS` ``http(s)://host[:port][/path]`` strings, without credentials,
    whitespace or control characters (the admin API and the shared channel both check this)."""
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ValueError("urls must be a list of strings")
    if len(urls) > MAX_REPLICAS:
        raise ValueError(f"at most {MAX_REPLICAS} replicas")
    for url in urls:
        shown = url[:100]
        if len(url) > MAX_URL_CHARS or _UNSAFE.search(url):
            raise ValueError(f"not a replica URL (too long, or whitespace or control characters): {shown!r}")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 (a bad port raises)
        except ValueError as exc:
            raise ValueError(f"not a replica URL: {shown!r}") from exc
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not http(s) URLs: {shown}")
        if parts.username is not None or parts.password is not None:
            raise ValueError(f"replica URLs carry no credentials: {parts.scheme}://...@{parts.hostname}")
    return list(urls)


class SharedState:
    def __init__(self, bus: Bus, breakers: router.BreakerConfig) -> None:
        self.bus = bus
        self._cooldown_s = breakers.cooldown_s
        self._board: router.BreakerBoard | None = None
        self._pool: SharedReplicas | None = None
        self._reload: Callable[[], None] | None = None
        self._applying = False
        bus.on(BREAKER, self._on_breaker, stored=True)
        bus.on(REPLICA, self._on_replica, stored=True)
        bus.on(RELOAD, self._on_reload)
        bus.on(MEMBERS, self._on_members)
        bus.on(DRAIN, self._on_drain)
        bus.on_resync(self._catch_up)

    def attach(
        self,
        board: router.BreakerBoard,
        pool: Pool | None = None,
        reload: Callable[[], None] | None = None,
    ) -> None:
        self._board = board
        if isinstance(pool, SharedReplicas):
            self._pool = pool
            pool.watch_replicas(self.replica_changed)
        self._reload = reload

    async def start(self) -> None:
        await self.bus.start()

    async def aclose(self) -> None:
        await self.bus.aclose()

    # -- breakers -------------------------------------------------------------------------------

    def breaker_changed(self, tier: str, modality: Modality, state: router.BreakerState) -> None:
        """The board's transition callback: tell the others of an opening or a closing made here."""
        if self._applying or state is router.BreakerState.HALF_OPEN:
            return
        why = self._board.last_failure(tier, modality) if self._board is not None else ""
        body = {"tier": tier, "modality": modality.value, "state": state.value, "at": time.time(), "why": why}
        self.bus.publish(BREAKER, body, field=f"{tier}|{modality.value}")

    def _on_breaker(self, msg: dict[str, Any]) -> None:
        if self._board is None:
            return
        state = router.BreakerState(msg["state"])
        ago = max(0.0, time.time() - float(msg.get("at", time.time())))
        self._applying = True
        try:
            self._board.apply(
                str(msg["tier"]),
                Modality(msg["modality"]),
                state,
                opened_ago_s=ago,
                why=str(msg.get("why", "")),
            )
        finally:
            self._applying = False
        log.info(
            "breaker %s/%s is %s: reported by %s", msg["tier"], msg["modality"], state.value, msg.get("by")
        )

    # -- replicas -------------------------------------------------------------------------------

    def replica_changed(self, url: str, healthy: bool, ejected_for_s: float, why: str) -> None:
        now = time.time()
        body = {"url": url, "healthy": healthy, "ejected_until": now + ejected_for_s, "why": why, "at": now}
        self.bus.publish(REPLICA, body, field=url)

    def _on_replica(self, msg: dict[str, Any]) -> None:
        if self._pool is not None:
            self._pool.apply_replica_state(
                str(msg["url"]),
                healthy=bool(msg["healthy"]),
                ejected_for_s=max(0.0, float(msg["ejected_until"]) - time.time()),
                why=str(msg.get("why", "")),
            )

    # -- configuration --------------------------------------------------------------------------

    def reloaded(self) -> None:
        """This instance re-read its settings (SIGHUP): every other one does too."""
        self.bus.publish(RELOAD, {})

    def _on_reload(self, msg: dict[str, Any]) -> None:
        if self._reload is not None:
            log.info("reloading settings: asked by %s", msg.get("by"))
            self._reload()

    def _on_members(self, msg: dict[str, Any]) -> None:
        if self._pool is None:
            return
        try:
            urls = check_replica_urls(msg.get("urls"))
        except ValueError as exc:
            log.warning("shared state: ignored a members message from %r: %s", str(msg.get("by"))[:100], exc)
            return
        log.info("cloud pool members are now %s: set through %s", urls, msg.get("by"))
        self._pool.set_members(urls)

    def _on_drain(self, msg: dict[str, Any]) -> None:
        if self._pool is not None and isinstance(msg.get("url"), str):
            name = next((str(r["name"]) for r in self._pool.replicas() if r["url"] == msg["url"]), None)
            if name is not None:
                self._pool.drain(name)

    def _catch_up(self, stored: dict[str, dict[str, dict[str, Any]]]) -> None:
        now = time.time()
        for msg in stored.get(BREAKER, {}).values():
            # An opening whose cool-down is over is history: the next call probes anyway.
            if msg.get("state") == "open" and now - float(msg.get("at", 0)) < self._cooldown_s:
                self._on_breaker(msg)
        for msg in stored.get(REPLICA, {}).values():
            recent_failure = not msg.get("healthy") and now - float(msg.get("at", 0)) < STALE_HEALTH_S
            if float(msg.get("ejected_until", 0)) > now or recent_failure:
                self._on_replica(msg)


class SharedPool:
    """The pool as the admin API sees it: a membership change or a drain made through this instance
    is made in every instance."""

    def __init__(self, pool: Pool, shared: SharedState) -> None:
        self._pool = pool
        self._shared = shared

    def replicas(self) -> list[dict[str, Any]]:
        return self._pool.replicas()

    def set_members(self, urls: Sequence[str]) -> None:
        self._pool.set_members(urls)
        self._shared.bus.publish(MEMBERS, {"urls": list(urls)})

    def drain(self, name: str) -> bool:
        url = next((str(r["url"]) for r in self._pool.replicas() if r["name"] == name), None)
        drained = self._pool.drain(name)
        if drained and url is not None:
            self._shared.bus.publish(DRAIN, {"url": url})
        return drained


MembersChanged = Callable[[list[str], list[str]], None]


def pool_reloader(
    urls_of: Callable[[], Sequence[str]] | None, pool: Pool | None, on_change: MembersChanged | None = None
) -> Callable[[], None]:
    """SIGHUP: re-read the settings (``urls_of``: their ``cloud.urls``; a ValueError: not readable)
    and apply the cloud pool's membership; ``on_change(before, after)`` is told (the audit trail)."""

    def reload() -> None:
        if urls_of is None or pool is None:
            return
        try:
            urls = list(urls_of())
        except ValueError as exc:
            log.error("SIGHUP: settings not reloaded: %s", exc)
            return
        if urls:
            log.info("SIGHUP: cloud pool members are now %s", urls)
            before = [str(r["url"]) for r in pool.replicas()]
            pool.set_members(urls)
            if on_change is not None:
                on_change(before, urls)
        else:
            log.warning("SIGHUP: cloud.urls is empty; the pool keeps its members")

    return reload
