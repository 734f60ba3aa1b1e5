"""How every Redis client of the gateway connects: one policy, one factory.

The result cache (:class:`~cache.RedisStore`), the semantic feed, the rate limits and the shared state
(``gateway/ops/shared/``) each open their clients with :func:`redis_client`, so they lose Redis and find
it again in the same way.  Why not redis-py's defaults: they are not one thing.  The project asked
for ``redis>=5.0``, which let pip pick any of 5.x (no retry at all), 6.x-7.x (3 retries backing off up
to 2, 4 and 8 s, with the pool's lock held while connecting) or 8.x (10 retries, and a pool of at most
100 connections that *raises* past that instead of waiting); it now asks for 8.0 and sets each of these
itself.  Each decided whether a gateway found Redis again after a restart, and how fast; and the last
one alone broke shared limits: with Redis up, bursts of 300 and 400 requests for a 60-a-minute tenant
across two gateways let 156-180 through (every call past the 100th failed at once and was counted in
the process instead, docs/reliability.md).

The policy, and what each part is for:

- **A bounded pool that waits** (``max_connections``, 500 by default): a burst beyond it takes its
  turn for a connection, waiting at most the call's own timeout, instead of failing over to counting
  alone.  The bound is large because a connection is held from a command until the event loop gets
  round to its reply, not for Redis's ~0.1 ms: with 50, a burst of 150 requests per gateway on two
  busy cores waited over a second for connections and 180 of 300 went through a limit of 60 again.
  Redis serves 10,000 clients by default; sockets are only opened as concurrency asks for them.
- **Checked before use** (``health_check_s``, 5 s): a connection idle longer than that is PINGed before
  its command.  A connection the outage broke, and that nobody used since, is found by the PING, not by
  the command; a half-open one (the close never arrived: a NAT, a container network, Redis on a host
  that went away) is found by the PING's timeout.  It costs one round trip per connection per idle
  spell; under steady load connections are never idle that long.
- **Retried once on a fresh connection** (``retries``, 1): a command or PING that fails with a
  connection error or a timeout is sent again after the broken connection is closed, so the retry
  goes out on a new socket; only if that fails too does the caller fall back (the cache: a miss; the
  limits: counted in this process).  One retry is enough for a Redis that is back (the new socket
  works) and bounds the wait for one that is not: 2 x the call's timeout at worst, not up to 11 x
  (8.x's defaults).
- **A short, bounded back-off** (``backoff_s``, 0.02 s; at most 4 x that): between the two attempts
  only, never across calls: a gateway finds a Redis that is back on its very next call.
- **No CLIENT SETINFO on connect** (``driver_info=None``): a Redis before 7.2 answers it with an
  error, and one such answer surfaced as a failed cache read while connections were being opened
  under load; a reconnect is one round trip shorter without it.
- Lua scripts are not this module's part: :class:`redis.commands.core.AsyncScript` answers NOSCRIPT (a
  restarted Redis has forgotten every script) by loading the script and running it again.

Measured with two gateways on a real Redis killed and restarted under load (tests/faults/
test_shared_redis.py): limits are counted in Redis again, and the cache reads and writes, within a
fraction of a second of Redis's return (docs/reliability.md, "Redis going away and coming back").
"""

from __future__ import annotations

import msgspec
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError


class RedisPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[redis]``: how every Redis client connects (the URLs are each part's own: ``cache.redis_url``,
    ``limits.redis_url``, ``shared.redis_url``)."""

    # Connections per client (a gateway has up to six clients); past it, a call waits for a free one
    # for at most its own timeout.
    max_connections: int = 500
    # A connection idle longer than this is PINGed before use; 0: never.
    health_check_s: float = 5.0
    # Times a failed command (a connection error or a timeout) is sent again on a fresh connection.
    retries: int = 1
    # The pause before the first retry; it doubles for each further one, to at most 4 x this.
    backoff_s: float = 0.02

    def __post_init__(self) -> None:
        if self.max_connections < 1:
            raise ValueError("redis.max_connections must be at least 1")
        if self.health_check_s < 0 or self.retries < 0 or self.backoff_s < 0:
            raise ValueError("redis.health_check_s, retries and backoff_s cannot be negative")


def redis_client(
    url: str,
    policy: RedisPolicy,
    *,
    timeout_s: float,
    read_timeout_s: float | None = None,
    listens: bool = False,
    decode_responses: bool = False,
) -> aioredis.Redis:
    """A client of the Redis at ``url`` that follows ``policy``.

    ``timeout_s`` bounds connecting, each read and write, and the wait for a pooled connection;
    ``read_timeout_s``, when given, bounds reads instead (a blocking XREAD waits longer than any other
    call); ``listens``: a pub/sub listener, whose reads wait for news as long as it takes (the health
    check PINGs it meanwhile).  Opening is lazy: nothing is connected until the first command."""
    socket_timeout = None if listens else timeout_s if read_timeout_s is None else read_timeout_s
    retry = Retry(
        ExponentialBackoff(cap=4 * policy.backoff_s, base=policy.backoff_s / 2),
        policy.retries,
        supported_errors=(RedisConnectionError, RedisTimeoutError, OSError),
    )
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=policy.max_connections,
        timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        socket_timeout=socket_timeout,
        socket_keepalive=True,
        health_check_interval=policy.health_check_s,
        retry=retry,
        decode_responses=decode_responses,
        driver_info=None,
    )
    return aioredis.Redis.from_pool(pool)
