"""Semantic entries shared through Redis: one stream that every gateway appends to and follows.

A Redis stream rather than pub/sub: a gateway that starts (or was cut off) reads the stream from its
beginning and so catches up with every entry still kept, then blocks for new ones; pub/sub would lose
whatever was published while it was away.  The stream is trimmed to about ``max_len`` entries (the
index's own bound), and an entry past its expiry is skipped by the index, so Redis never holds more
than one index's worth.  The answers themselves are in the result store (the same Redis).
"""

from __future__ import annotations

from typing import Any

from redis.exceptions import RedisError

from cache._protocol import CacheError
from cache._redis import shown_url
from cache._redis_client import RedisPolicy, redis_client
from cache._semantic import Entry, decode_entry, encode_entry

START = "0-0"
_FIELD = b"e"


class SemanticFeed:
    def __init__(
        self,
        url: str,
        stream: str,
        *,
        max_len: int,
        timeout_s: float,
        block_s: float = 5.0,
        policy: RedisPolicy | None = None,
    ) -> None:
        self._url = shown_url(url)
        self._stream = stream
        self._max_len = max_len
        self._block_ms = int(block_s * 1000)
        policy = policy or RedisPolicy()
        self._client = redis_client(url, policy, timeout_s=timeout_s)
        # Blocking reads wait up to block_s, longer than the short timeout every other call has.
        self._follower = redis_client(
            url, policy, timeout_s=timeout_s, read_timeout_s=block_s + timeout_s + 1
        )

    async def append(self, entry: Entry) -> None:
        try:
            await self._client.xadd(
                self._stream, {_FIELD: encode_entry(entry)}, maxlen=self._max_len, approximate=True
            )
        except (RedisError, OSError) as exc:
            raise CacheError(f"redis at {self._url}: {exc}") from exc

    async def read(self, after: str, *, block: bool, count: int = 1000) -> tuple[str, list[Entry]]:
        """Entries after the stream id ``after`` (waiting up to block_s for one when ``block``), and the
        id to read after next time."""
        client = self._follower if block else self._client
        try:
            answer = await client.xread(
                {self._stream: after}, count=count, block=self._block_ms if block else None
            )
        except (RedisError, OSError) as exc:
            raise CacheError(f"redis at {self._url}: {exc}") from exc
        return _parsed(answer, after)

    async def aclose(self) -> None:
        await self._client.aclose()
        await self._follower.aclose()


def _parsed(answer: Any, after: str) -> tuple[str, list[Entry]]:
    entries: list[Entry] = []
    last = after
    for _stream, messages in answer or ():
        for message_id, fields in messages:
            last = message_id.decode() if isinstance(message_id, bytes) else str(message_id)
            data = fields.get(_FIELD)
            entry = decode_entry(data) if isinstance(data, bytes) else None
            if entry is not None:
                entries.append(entry)
    return last, entries
