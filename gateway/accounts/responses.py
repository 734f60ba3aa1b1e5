"""Stored responses (the Responses API's ``store``), per tenant, in the gateway's database.

Each row keeps a response as it was answered (for ``GET /v1/responses/{id}``), the response it
continued (``parent``) and the chat messages it added to the conversation (its input items and its
answer; never the instructions, which OpenAI does not carry over).  Continuing a response with
``previous_response_id`` reads its chain of rows in one recursive query, so each turn is stored once
however long the conversation grows, and the read is bounded: at most ``max_turns`` rows and
``max_conversation_bytes`` bytes, else a 400.  A response whose chain lost a row (deleted, expired)
cannot be continued: a 404 that says so.

Rows expire after ``retention_s``; a tenant's rows together stay under ``max_bytes_per_tenant`` (a
request that would store more is refused before it runs, so nothing answered is lost).  Every query
names the tenant: another tenant's id is not found.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from sqlalchemy import Engine, delete, func, literal, select
from sqlalchemy.exc import SQLAlchemyError

from gateway.accounts.storage import responses
from gateway.errors import InvalidRequest, NotFound, RateLimited, StorageUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")
USAGE_TTL_S = 5.0


class ResponseSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # How long a stored response can be read or continued (OpenAI keeps them 30 days).
    retention_s: float = 30 * 86400
    # The most a conversation continued with previous_response_id may take: its turns' stored bytes,
    # and their number.
    max_conversation_bytes: int = 16 << 20
    max_turns: int = 10_000
    # The most a tenant's stored responses may take together.
    max_bytes_per_tenant: int = 1 << 30
    # How often expired responses are deleted.
    sweep_interval_s: float = 600.0


class StoreFull(RateLimited):
    """The tenant's stored responses are at their limit (a 429, as OpenAI answers a spent quota)."""

    code = "storage_quota_exceeded"


@dataclass(frozen=True, slots=True)
class Stored:
    body: bytes  # the response object as answered
    added: bytes  # the messages it added to the conversation (JSON)
    parent: str | None = None  # the response it continued


@dataclass(frozen=True, slots=True)
class Turn:
    """A row of a conversation's chain, as read back from ``previous_response_id``."""

    added: bytes
    parent: str | None
    total: int  # bytes of the rows from the newest to this one
    turns: int  # rows from the newest to this one


def _not_found(response_id: str) -> NotFound:
    return NotFound(f"No response with id {response_id[:64]!r} found", param="response_id")


class ResponseStore:
    """The table's reads and writes, each run off the event loop."""

    def __init__(self, engine: Engine, settings: ResponseSettings) -> None:
        self._engine = engine
        self.settings = settings
        self._sweeper: asyncio.Task[None] | None = None
        # Each tenant's stored bytes as last read (when, how many), plus what this gateway stored
        # since: the room check reads the database at most every USAGE_TTL_S per tenant (another
        # gateway's writes are seen that late: the limit may be passed by what they store meanwhile).
        self._usage: dict[str, tuple[float, int]] = {}

    async def get(self, tenant: str, response_id: str) -> bytes:
        """The tenant's stored response body; :class:`NotFound` if there is none (or it expired)."""
        body = await self._run(self._get, tenant, response_id)
        if body is None:
            raise _not_found(response_id)
        return body

    async def conversation(self, tenant: str, response_id: str) -> list[bytes]:
        """What each turn up to ``response_id`` added, oldest first."""
        chain = await self._run(self._chain, tenant, response_id)
        if not chain:
            raise NotFound(f"No response with id {response_id[:64]!r} found", param="previous_response_id")
        oldest, limits = chain[-1], self.settings
        if oldest.turns >= limits.max_turns or oldest.total > limits.max_conversation_bytes:
            raise InvalidRequest(
                f"the conversation has reached {limits.max_turns} responses or "
                f"{limits.max_conversation_bytes} bytes; start a new one",
                param="previous_response_id",
            )
        if oldest.parent is not None:
            raise NotFound(
                f"response {oldest.parent[:64]!r}, earlier in this conversation, was deleted or "
                "expired: the conversation cannot be continued",
                param="previous_response_id",
            )
        return [turn.added for turn in reversed(chain)]

    async def check_room(self, tenant: str) -> None:
        """Before a response that will be stored runs: the tenant's rows have room."""
        read_at, used = self._usage.get(tenant, (0.0, 0))
        if time.monotonic() - read_at > USAGE_TTL_S:
            used = await self._run(self._used, tenant)
            self._usage[tenant] = (time.monotonic(), used)
        if used >= self.settings.max_bytes_per_tenant:
            raise StoreFull(
                f"this tenant's stored responses take {used} bytes, at its limit of "
                f"{self.settings.max_bytes_per_tenant}; delete some (DELETE /v1/responses/{{id}}), "
                "or send store: false",
                retry_after_s=60,
                reason="stored_responses",
            )

    async def put(self, tenant: str, response_id: str, stored: Stored) -> None:
        await self._run(self._put, tenant, response_id, stored)
        if tenant in self._usage:
            read_at, used = self._usage[tenant]
            self._usage[tenant] = (read_at, used + len(stored.body) + len(stored.added))

    async def delete(self, tenant: str, response_id: str) -> None:
        if not await self._run(self._delete, tenant, response_id):
            raise _not_found(response_id)
        self._usage.pop(tenant, None)  # read again on the next check

    async def sweep(self) -> int:
        """Delete the expired rows; how many there were."""
        swept = await self._run(self._sweep)
        if swept:
            self._usage.clear()
        return swept

    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="responses-sweep")

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    async def _sweep_forever(self) -> None:
        while True:
            try:
                if swept := await self.sweep():
                    log.info("deleted %d expired stored responses", swept)
            except StorageUnavailable as exc:
                log.warning("stored responses not swept: %s", exc)
            await asyncio.sleep(self.settings.sweep_interval_s)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.to_thread(fn, *args)
        except SQLAlchemyError as exc:
            problem = exc.__class__.__name__
            raise StorageUnavailable(f"stored responses cannot be read or written: {problem}") from exc

    # -- on a worker thread ----------------------------------------------------------------------

    def _live(self, tenant: str) -> Any:
        return (responses.c.tenant == tenant) & (responses.c.expires_at > time.time())

    def _get(self, tenant: str, response_id: str) -> bytes | None:
        query = select(responses.c.body).where(responses.c.id == response_id, self._live(tenant))
        with self._engine.connect() as conn:
            return conn.execute(query).scalar()

    def _chain(self, tenant: str, response_id: str) -> list[Turn]:
        """The rows from ``response_id`` back to the first (newest first), with each one's parent;
        it stops at ``max_turns`` rows, or at the first row past ``max_conversation_bytes``."""
        r = responses.c
        start = select(r.id, r.parent, r.added, r.size.label("total"), literal(1).label("turns"))
        chain = start.where(r.id == response_id, self._live(tenant)).cte("chain", recursive=True)
        older = responses.alias("older")
        o = older.c
        chain = chain.union_all(
            select(o.id, o.parent, o.added, chain.c.total + o.size, chain.c.turns + 1).where(
                o.id == chain.c.parent,
                o.tenant == tenant,
                o.expires_at > time.time(),
                chain.c.turns < self.settings.max_turns,
                chain.c.total <= self.settings.max_conversation_bytes,
            )
        )
        c = chain.c
        query = select(c.added, c.parent, c.total, c.turns).order_by(c.turns)
        with self._engine.connect() as conn:
            return [Turn(row.added, row.parent, row.total, row.turns) for row in conn.execute(query)]

    def _used(self, tenant: str) -> int:
        query = select(func.coalesce(func.sum(responses.c.size), 0)).where(self._live(tenant))
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def _put(self, tenant: str, response_id: str, stored: Stored) -> None:
        now = time.time()
        row = {
            "id": response_id,
            "tenant": tenant,
            "parent": stored.parent,
            "created_at": now,
            "expires_at": now + self.settings.retention_s,
            "size": len(stored.body) + len(stored.added),
            "body": stored.body,
            "added": stored.added,
        }
        with self._engine.begin() as conn:
            conn.execute(responses.insert().values(row))

    def _delete(self, tenant: str, response_id: str) -> bool:
        with self._engine.begin() as conn:
            result = conn.execute(
                delete(responses).where(responses.c.id == response_id, responses.c.tenant == tenant)
            )
        return bool(result.rowcount)

    def _sweep(self) -> int:
        with self._engine.begin() as conn:
            result = conn.execute(delete(responses).where(responses.c.expires_at <= time.time()))
        return int(result.rowcount or 0)
