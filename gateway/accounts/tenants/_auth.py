"""Who is calling: ``Authorization: Bearer <key>`` (or ``x-api-key: <key>``, as Anthropic's clients send
it) → :class:`Caller`, or 401.

Keys looked up in the database are trusted for ``auth.key_cache_s``; within that time a
request costs one hash and one constant-time compare, no database access.  While the
database cannot be reached, a key seen before keeps its last answer; an unseen one gets 503.
Failed authentications are counted per client address (:class:`FailureThrottle`): an address over
its failures gets 429 with Retry-After, whatever key it sends, until the window has passed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

from sqlalchemy.exc import SQLAlchemyError

from gateway.accounts.tenants._keys import key_id_of, matches
from gateway.accounts.tenants._models import DEFAULT_TENANT, OPEN_MODE_KEY_ID, TENANT, Caller, Tenant
from gateway.accounts.tenants._store import TenantStore
from gateway.accounts.tenants._throttle import FailureThrottle
from gateway.errors import AuthenticationFailed, StorageUnavailable
from gateway.ops.clients import CLIENT_HOST

log = logging.getLogger(__name__)

_Entry = tuple[float, str, str, Tenant | None, bool]  # fetched_at, hash, role, tenant, revoked


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
    ) -> None:
        self._store = store
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

    async def caller(self, headers: Mapping[str, str]) -> Caller:
        """The caller named by the request's key; 401 when missing, unknown, wrong or revoked."""
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
        if not matches(key, entry[1] if entry is not None else None) or entry is None:
            self._throttle.failed(address)
            raise AuthenticationFailed("invalid API key")
        _, _, role, tenant, revoked = entry
        if revoked:
            self._throttle.failed(address)
            raise AuthenticationFailed("this API key has been revoked")
        assert key_id is not None
        return Caller(key_id=key_id, role=role, tenant=tenant)

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
        entry = None if found is None else (now, *found)
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
