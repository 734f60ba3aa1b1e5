"""What gateway instances tell each other, through Redis: a pub/sub channel for news, hashes for the
state a newly started instance must catch up on.

    gateway A ──publish──▶ <prefix>events ──▶ gateway B, C ... (each ignores its own messages)
              ──HSET────▶ <prefix><kind>   ◀── read by an instance when it (re)connects

Publishing never blocks a request: messages go into a queue that one task sends in order. When
Redis is away, each instance goes on with its own state and catches up when Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any

import msgspec
from redis.exceptions import RedisError

import cache

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], None]
# Called on each (re)connection with the stored state of every kind: kind -> field -> value.
Resync = Callable[[dict[str, dict[str, dict[str, Any]]]], None]

RETRY_S = 1.0
_QUEUE_BOUND = 10_000
_MAX_MESSAGE_BYTES = 1 << 20


def instance_name(configured: str) -> str:
    return configured or f"{socket.gethostname()}-{os.getpid()}"


def publish_now(url: str, prefix: str, kind: str, by: str) -> int:
    """Publish one message from outside a gateway (``tiergate reload``); how many gateways heard it."""
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=2.0, socket_timeout=2.0)
    try:
        return int(client.publish(prefix + "events", msgspec.json.encode({"kind": kind, "by": by})))
    finally:
        client.close()


class Bus:
    def __init__(
        self, url: str, *, prefix: str, instance: str, policy: cache.RedisPolicy | None = None
    ) -> None:
        self._url = url
        self._prefix = prefix
        self.instance = instance
        # Both follow the gateway's one Redis policy (cache.RedisPolicy). Commands time out; the
        # subscription waits for news as long as it takes, PINGed every health_check_s so that a
        # connection that died silently is noticed.
        policy = policy or cache.RedisPolicy()
        self._redis = cache.redis_client(url, policy, timeout_s=2.0)
        self._listener = cache.redis_client(url, policy, timeout_s=2.0, listens=True)
        self._handlers: dict[str, Handler] = {}
        self._stored_kinds: list[str] = []
        self._resync: list[Resync] = []
        self._outbox: asyncio.Queue[tuple[str, str, dict[str, Any]]] = asyncio.Queue(_QUEUE_BOUND)
        self._tasks: list[asyncio.Task[None]] = []
        self.connected = asyncio.Event()

    @property
    def channel(self) -> str:
        return self._prefix + "events"

    def on(self, kind: str, handler: Handler, *, stored: bool = False) -> None:
        """Call ``handler`` with each message of ``kind`` from another instance; ``stored`` kinds
        also keep their latest value per field in a hash for instances that start later."""
        self._handlers[kind] = handler
        if stored:
            self._stored_kinds.append(kind)

    def on_resync(self, resync: Resync) -> None:
        self._resync.append(resync)

    def publish(self, kind: str, body: dict[str, Any], *, field: str = "") -> None:
        """Queue a message (and, with ``field``, store it as that field's latest state)."""
        message = {"kind": kind, "by": self.instance, **body}
        try:
            self._outbox.put_nowait((kind, field, message))
        except asyncio.QueueFull:
            log.warning(
                "shared state: %d messages waiting for Redis; dropping a %s message", _QUEUE_BOUND, kind
            )

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._listen(), name="shared-state listen"),
            asyncio.create_task(self._send(), name="shared-state send"),
        ]
        with contextlib.suppress(TimeoutError):  # go on without it; it catches up when Redis answers
            await asyncio.wait_for(self.connected.wait(), 3.0)

    async def aclose(self) -> None:
        with contextlib.suppress(TimeoutError):  # let queued news go out
            await asyncio.wait_for(self._drained(), 1.0)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._redis.aclose()
        await self._listener.aclose()

    async def _drained(self) -> None:
        if self.connected.is_set():
            await self._outbox.join()

    async def _send(self) -> None:
        while True:
            kind, field, message = await self._outbox.get()
            data = msgspec.json.encode(message)
            while True:
                try:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        if field:
                            pipe.hset(self._prefix + kind, field, data)
                        pipe.publish(self.channel, data)
                        await pipe.execute()
                    break
                except (RedisError, OSError) as exc:
                    log.warning("shared state: cannot publish to Redis (%s); retrying", exc)
                    await asyncio.sleep(RETRY_S)
            self._outbox.task_done()

    async def _listen(self) -> None:
        while True:
            try:
                async with self._listener.pubsub(ignore_subscribe_messages=True) as pubsub:
                    await pubsub.subscribe(self.channel)
                    await self._catch_up()
                    self.connected.set()
                    log.info("shared state: %s listening on %s", self.instance, self.channel)
                    async for message in pubsub.listen():
                        self._dispatch(message.get("data"))
            except (RedisError, OSError) as exc:
                if self.connected.is_set():
                    log.warning(
                        "shared state: lost Redis (%s); this instance goes on alone until it is back", exc
                    )
                self.connected.clear()
                await asyncio.sleep(RETRY_S)
            except Exception:  # whatever it was, the listener must not die of it: listen again
                log.exception("shared state: the listener failed; listening again")
                self.connected.clear()
                await asyncio.sleep(RETRY_S)

    async def _catch_up(self) -> None:
        stored: dict[str, dict[str, dict[str, Any]]] = {}
        for kind in self._stored_kinds:
            raw = await self._redis.hgetall(self._prefix + kind)
            stored[kind] = {}
            for k, v in raw.items():
                message = _decoded(v)
                if message is None:
                    log.warning("shared state: skipped a malformed stored %s entry", kind)
                    continue
                stored[kind][k.decode(errors="replace") if isinstance(k, bytes) else str(k)] = message
        for resync in self._resync:
            _safely(resync, stored)

    def _dispatch(self, data: object) -> None:
        message = _decoded(data)
        if message is None:
            log.warning("shared state: skipped a malformed message on %s", self.channel)
            return
        if message.get("by") == self.instance:
            return
        handler = self._handlers.get(str(message.get("kind")))
        if handler is not None:
            _safely(handler, message)


def _decoded(data: object) -> dict[str, Any] | None:
    """A message as a JSON object, or None for anything else (not JSON, not an object, too big or
    nested too deeply)."""
    if not isinstance(data, bytes | str) or len(data) > _MAX_MESSAGE_BYTES:
        return None
    try:
        message = msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    return message if isinstance(message, dict) else None


def _safely(fn: Callable[[Any], object], arg: Any) -> None:
    try:
        fn(arg)
    except Exception as exc:  # a message of the right kind with bad fields: skip it
        log.warning(
            "shared state: skipped a %s message: %s: %s", arg.get("kind", "?"), type(exc).__name__, exc
        )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
