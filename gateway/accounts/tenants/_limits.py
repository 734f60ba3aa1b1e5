"""Per-tenant rate limits over fixed one-minute windows: requests, tokens, media parts and seconds.

Admission counts the request (and its media parts) and refuses it with 429 when a count
would pass its limit; tokens are charged after the answer (its real usage), and a tenant
whose tokens for this minute are spent is refused until the next minute.  Counts live in
this process (:class:`LocalLimiter`) or in Redis (:class:`RedisLimiter`), where every
gateway instance shares them, so a limit does not multiply with the instance count.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Protocol

import cache
from gateway.accounts.tenants._keylimits import KeyLimits
from gateway.accounts.tenants._models import Tenant
from gateway.accounts.tenants._settings import TenantLimits
from gateway.errors import RateLimited

log = logging.getLogger(__name__)

WINDOW_S = 60


@dataclass(frozen=True, slots=True)
class Demand:
    """What one request asks of its tenant's limits at admission."""

    images: int = 0
    audio: int = 0
    video: int = 0
    # Seconds of media, rounded up, as preprocessing measured them.
    video_seconds: int = 0
    audio_seconds: int = 0
    # Whether this counts as a request (False: the media seconds of an admitted one, counted once its
    # media are prepared).
    request: bool = True


# (counter, amount, limit) — a check passes when count + max(amount, 1) <= limit.
_Check = tuple[str, int, int]


def _checks(limits: TenantLimits, demand: Demand) -> list[_Check]:
    wanted = [
        ("requests", int(demand.request), limits.requests_per_min),
        ("tokens", 0, limits.tokens_per_min),
        ("images", demand.images, limits.images_per_min),
        ("audio", demand.audio, limits.audio_per_min),
        ("video", demand.video, limits.video_per_min),
        ("video_seconds", demand.video_seconds, limits.video_seconds_per_min),
        ("audio_seconds", demand.audio_seconds, limits.audio_seconds_per_min),
    ]
    # tokens: checked at admission (counted when the answer is), not again for media seconds
    tokens = demand.request
    return [(n, a, limit) for n, a, limit in wanted if limit > 0 and (a or (n == "tokens" and tokens))]


def key_scope(key_id: str, limits: KeyLimits) -> Tenant | None:
    """A key's own per-minute limits as a scope the limiters count as they count a tenant's (None when
    it has none).  Its id is negative (minus one minus the key id read as hex), so a key's counters
    never share a tenant's, in this process or in Redis."""
    if not (limits.requests_per_min or limits.tokens_per_min):
        return None
    try:
        number = int(key_id, 16)
    except ValueError:
        number = int.from_bytes(key_id.encode()[:8], "big")
    own = TenantLimits(requests_per_min=limits.requests_per_min, tokens_per_min=limits.tokens_per_min)
    return Tenant(id=-1 - number, name=key_id, created_at=0.0, limits=own)


def _refuse(tenant: Tenant, counter: str, limit: int, now: float) -> RateLimited:
    unit = counter.replace("_", " ") + (" parts" if counter in ("audio", "video") else "")
    kind = "key" if tenant.id < 0 else "tenant"  # a key's scope (key_scope) or a tenant
    return RateLimited(
        f"{kind} {tenant.name!r} is over its limit of {limit} {unit} per minute; retry after the "
        "Retry-After seconds",
        retry_after_s=WINDOW_S - (now % WINDOW_S),
        reason=f"{kind}_{counter}",
    )


class RateLimiter(Protocol):
    async def admit(self, tenant: Tenant, demand: Demand) -> None:
        """Count the request, or raise :class:`RateLimited` (and count nothing)."""
        ...

    async def charge_tokens(self, tenant: Tenant, tokens: int) -> None: ...

    async def aclose(self) -> None: ...


class LocalLimiter:
    def __init__(self) -> None:
        self._window = -1
        self._counts: dict[tuple[int, str], int] = {}

    def _current(self, now: float) -> dict[tuple[int, str], int]:
        window = int(now // WINDOW_S)
        if window != self._window:
            self._window = window
            self._counts = {}
        return self._counts

    async def admit(self, tenant: Tenant, demand: Demand) -> None:
        checks = _checks(tenant.limits, demand)
        if not checks:
            return
        now = time.time()
        counts = self._current(now)
        for counter, amount, limit in checks:
            if counts.get((tenant.id, counter), 0) + max(amount, 1) > limit:
                raise _refuse(tenant, counter, limit, now)
        for counter, amount, _ in checks:
            if amount:
                counts[(tenant.id, counter)] = counts.get((tenant.id, counter), 0) + amount

    async def charge_tokens(self, tenant: Tenant, tokens: int) -> None:
        if tenant.limits.tokens_per_min > 0 and tokens > 0:
            counts = self._current(time.time())
            counts[(tenant.id, "tokens")] = counts.get((tenant.id, "tokens"), 0) + tokens

    async def aclose(self) -> None:
        return None


# Check every counter, then count them all, atomically. KEYS: counters; ARGV: amounts,
# then limits, then the expiry. Returns 0, or the 1-based index of the counter over its limit.
_ADMIT = """
local n = #KEYS
for i = 1, n do
  local count = tonumber(redis.call('GET', KEYS[i]) or '0')
  local amount = tonumber(ARGV[i])
  if amount < 1 then amount = 1 end
  if count + amount > tonumber(ARGV[n + i]) then return i end
end
for i = 1, n do
  local amount = tonumber(ARGV[i])
  if amount > 0 then
    redis.call('INCRBY', KEYS[i], amount)
    redis.call('EXPIRE', KEYS[i], ARGV[2 * n + 1])
  end
end
return 0
"""


class RedisLimiter:
    """Counts in Redis, shared by every gateway on the same server. If Redis cannot be
    reached, this process counts on its own (and logs it) rather than refusing everyone.

    The client follows the gateway's one :class:`cache.RedisPolicy`: a call that meets a connection
    broken while Redis was away is sent once more on a fresh one before counting falls back here, and
    a burst waits for a pooled connection instead of failing over (with redis-py 8's pool of 100 that
    raised past it, a burst of 400 across two gateways let 180 through a limit of 60).  A restarted
    Redis has forgotten the script: ``register_script``'s object loads it again on NOSCRIPT.  A retry
    after a timeout can count a request twice if Redis did run the first attempt: an error towards
    refusing, and only when Redis answers slower than the 1 s timeout.
    """

    def __init__(
        self, url: str, *, prefix: str = "tiergate:rl", policy: cache.RedisPolicy | None = None
    ) -> None:
        self._redis = cache.redis_client(url, policy or cache.RedisPolicy(), timeout_s=1.0)
        self._admit = self._redis.register_script(_ADMIT)
        self._prefix = prefix
        self._fallback = LocalLimiter()

    def _key(self, tenant: Tenant, counter: str, now: float) -> str:
        return f"{self._prefix}:{tenant.id}:{int(now // WINDOW_S)}:{counter}"

    async def admit(self, tenant: Tenant, demand: Demand) -> None:
        from redis.exceptions import RedisError

        checks = _checks(tenant.limits, demand)
        if not checks:
            return
        now = time.time()
        keys = [self._key(tenant, counter, now) for counter, _, _ in checks]
        args = [amount for _, amount, _ in checks] + [limit for _, _, limit in checks] + [2 * WINDOW_S]
        try:
            over = int(await self._admit(keys=keys, args=args))
        except RedisError as exc:
            log.warning("rate limits counted in this process only: redis failed: %s", exc)
            await self._fallback.admit(tenant, demand)
            return
        if over:
            counter, _, limit = checks[over - 1]
            raise _refuse(tenant, counter, limit, now)

    async def charge_tokens(self, tenant: Tenant, tokens: int) -> None:
        from redis.exceptions import RedisError

        if tenant.limits.tokens_per_min <= 0 or tokens <= 0:
            return
        key = self._key(tenant, "tokens", time.time())
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                pipe.incrby(key, tokens)
                pipe.expire(key, 2 * WINDOW_S)
                await pipe.execute()
        except RedisError as exc:
            log.warning("tokens counted in this process only: redis failed: %s", exc)
            await self._fallback.charge_tokens(tenant, tokens)

    async def aclose(self) -> None:
        await self._redis.aclose()


def make_limiter(redis_url: str, policy: cache.RedisPolicy | None = None) -> RateLimiter:
    return RedisLimiter(redis_url, policy=policy) if redis_url else LocalLimiter()
