"""Who is calling: ``Authorization: Bearer <key>`` (or ``x-api-key: <key>``, as Anthropic's clients send
it) → :class:`Caller`, or 401.

Keys looked up in the database are trusted for ``auth.key_cache_s``; within that time a
request costs one hash and one constant-time compare, no database access.  While the
database cannot be reached, a key seen before keeps its last answer; an unseen one gets 503.
Failed authentications are counted per client address (:class:`FailureThrottle`): an address over
its failures gets 429 with Retry-After, whatever key it sends, until the window has passed.

A key past its ``expires_at`` is a 401, as is a rotated key's old secret once its overlap has passed
(both read against the clock at every request, not the cache's age).  A key's last use is cheap: a
request sets one entry of an in-memory map (key id → time); a background task writes the map in one
transaction every ``auth.last_used_flush_s`` (30 s: at most one UPDATE per key used per 30 s, however
many requests) and once more at shutdown, so ``last_used`` is at most that far behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from sqlalchemy.exc import SQLAlchemyError

from gateway.accounts.tenants._keys import key_id_of, matches
from gateway.accounts.tenants._models import DEFAULT_TENANT, OPEN_MODE_KEY_ID, TENANT, Caller
from gateway.accounts.tenants._store import KeyRecord, TenantStore
from gateway.accounts.tenants._throttle import FailureThrottle
from gateway.errors import AuthenticationFailed, StorageUnavailable
from gateway.ops.clients import CLIENT_HOST

log = logging.getLogger(__name__)

_Entry = KeyRecord | None


def key_of(headers: Mapping[str, str]) -> str:
    """The key a request sends: ``Authorization: Bearer <key>`` (OpenAI's clients), else
    ``x-api-key: <key>`` (Anthropic's); empty when neither is there."""
    auth = headers.get("authorization")
    if auth is not None:
        scheme, _, key = auth.partition(" ")
        return key.strip() if scheme.lower() == "bearer" else ""
    return headers.get("x-api-key", "").strip()


class Authenticator:
    def __init__(
        self,
        store: TenantStore,
        *,
        cache_s: float,
        open_mode: bool = False,
        throttle: FailureThrottle | None = None,
        cache_entries: int = 100_000,
        flush_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._clock = clock
        self._flush_s = flush_s
        self._used: dict[str, float] = {}  # key id → last use, not yet written
        self._flusher: asyncio.Task[None] | None = None
        self._throttle = throttle or FailureThrottle(0, 0.0)
        self._cache_s = cache_s
        self._cache_entries = cache_entries
        self._open_mode = open_mode
        self._open_caller: Caller | None = None
        self._cache: dict[str, _Entry | None] = {}
        self._fetched: dict[str, float] = {}

    async def start(self) -> None:
        if self._open_mode:
            tenant = await asyncio.to_thread(self._store.tenant, DEFAULT_TENANT)
            self._open_caller = Caller(key_id=OPEN_MODE_KEY_ID, role=TENANT, tenant=tenant)
        else:
            self._flusher = asyncio.create_task(self._flush_every(), name="keys-last-used")

    async def _flush_every(self) -> None:
        while True:
            await asyncio.sleep(self._flush_s)
            try:
                await self.flush_last_used()
            except SQLAlchemyError as exc:
                log.warning("keys' last use not written (kept for the next try): %s", exc)

    async def flush_last_used(self) -> None:
        """Write the keys' last use gathered since the last flush (one transaction)."""
        used, self._used = self._used, {}
        try:
            await asyncio.to_thread(self._store.touch, used)
        except BaseException:
            for key_id, when in used.items():  # keep them for the next try
                self._used[key_id] = max(when, self._used.get(key_id, 0.0))
            raise

    async def aclose(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        with contextlib.suppress(SQLAlchemyError):
            await self.flush_last_used()

    async def caller(self, headers: Mapping[str, str]) -> Caller:
        """The caller named by the request's key; 401 when missing, unknown, wrong, revoked, expired,
        or a rotated key's old secret past its overlap."""
        if self._open_caller is not None:
            return self._open_caller
        key = key_of(headers)
        if not key:
            raise AuthenticationFailed(
                "no API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
                " (tiergate keys create --tenant NAME)"
            )
        address = CLIENT_HOST.get()
        self._throttle.check(address)
        key_id = key_id_of(key)
        entry = await self._entry(key_id) if key_id is not None else None
        now = self._clock()
        current = matches(key, entry.key_hash if entry is not None else None)
        previous = matches(key, entry.previous_hash if entry is not None else None)
        if entry is None or not (current or previous):
            self._throttle.failed(address)
            raise AuthenticationFailed("invalid API key")
        if not current and (entry.previous_until or 0.0) <= now:
            self._throttle.failed(address)
            raise AuthenticationFailed("this API key was rotated and its overlap has ended")
        if entry.revoked:
            self._throttle.failed(address)
            raise AuthenticationFailed("this API key has been revoked")
        expires = entry.limits.expires_at
        if expires is not None and expires <= now:
            self._throttle.failed(address)
            raise AuthenticationFailed("this API key has expired")
        assert key_id is not None
        self._used[key_id] = now
        return Caller(key_id=key_id, role=entry.role, tenant=entry.tenant, limits=entry.limits)

    async def caller_of_key(self, key_id: str) -> Caller:
        """The caller of a key known by its id (a batch's lines run as the key that made the batch):
        401 when the key is gone, revoked or expired since."""
        if self._open_caller is not None:
            return self._open_caller
        entry = await self._entry(key_id)
        if entry is None or entry.revoked:
            raise AuthenticationFailed("the API key that created this batch is gone or revoked")
        expires = entry.limits.expires_at
        if expires is not None and expires <= self._clock():
            raise AuthenticationFailed("the API key that created this batch has expired")
        return Caller(key_id=key_id, role=entry.role, tenant=entry.tenant, limits=entry.limits)

    async def _entry(self, key_id: str) -> _Entry | None:
        now = time.monotonic()
        if key_id in self._cache and now - self._fetched[key_id] < self._cache_s:
            return self._cache[key_id]
        try:
            found = await asyncio.to_thread(self._store.lookup, key_id)
        except SQLAlchemyError as exc:
            if key_id not in self._cache:
                raise StorageUnavailable("the key database cannot be reached; retry shortly") from exc
            # The database is away: keep trusting what it said last (looked up again after cache_s).
            log.warning("key database unreachable, using the last answer for key %s: %s", key_id, exc)
            self._fetched[key_id] = now
            return self._cache[key_id]
        entry = found
        if len(self._cache) >= self._cache_entries:  # unknown ids are cached too; keep the map bounded
            self._cache.clear()
            self._fetched.clear()
        self._cache[key_id] = entry
        self._fetched[key_id] = now
        return entry

    def forget(self, key_id: str | None = None) -> None:
        """Drop cached keys (one, or all): the next request looks them up again."""
        if key_id is None:
            self._cache.clear()
            self._fetched.clear()
        else:
            self._cache.pop(key_id, None)
            self._fetched.pop(key_id, None)
