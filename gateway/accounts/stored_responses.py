"""Stored responses (the Responses API's ``store``), per tenant, in the gateway's database.

Each row keeps a response as it was answered (for ``GET /v1/responses/{id}``), the response it
continued (``parent``) and the chat messages it added to the conversation (its input items and its
answer; never the instructions, which OpenAI does not carry over).  Continuing a response with
``previous_response_id`` reads its chain of rows in one recursive query, so each turn is stored once
however long the conversation grows, and the read is bounded: at most ``max_turns`` rows and
``max_conversation_bytes`` bytes, else a 400.  A response whose chain lost a row (deleted, expired)
cannot be continued: a 404 that says so.

A new row is written ahead (gateway/accounts/held_responses.py) when the database is SQLite and the
ledger's rows are kept to the same promise (``ledger.sync = "os"``): in a file and in memory before the
answer, in the table within ``flush_interval_s``; otherwise it is written through before the answer.

Rows expire after ``retention_s``; a tenant's rows together stay under ``max_bytes_per_tenant`` (a
request that would store more is refused before it runs, so nothing answered is lost).  Every query
names the tenant: another tenant's id is not found.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from sqlalchemy import Engine, delete, func, literal, select
from sqlalchemy.exc import SQLAlchemyError

from gateway.accounts.held_responses import HeldResponses, HeldRow
from gateway.accounts.storage import responses
from gateway.errors import InvalidRequest, NotFound, RateLimited, StorageUnavailable
from gateway.ops import background

log = logging.getLogger(__name__)
T = TypeVar("T")
USAGE_TTL_S = 5.0
# HeldRow's fields, in order.
_SQLITE_INSERT = (
    "INSERT OR IGNORE INTO responses (id, tenant, parent, created_at, expires_at, size, body, added) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


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
    # How long a new response may wait in the write-ahead file before it is in the database (SQLite
    # with ledger.sync = "os" only; it is readable at once either way).
    flush_interval_s: float = 0.25
    # ... and the most such responses may take in memory together; past it a new one waits for the
    # database (docs/reliability.md, "Memory bounds").
    max_held_bytes: int = 64 << 20


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


@contextlib.contextmanager
def _storage_errors() -> Iterator[None]:
    try:
        yield
    except (SQLAlchemyError, OSError) as exc:  # OSError: the write-ahead file's folder
        problem = exc.__class__.__name__
        raise StorageUnavailable(f"stored responses cannot be read or written: {problem}") from exc


def _not_found(response_id: str) -> NotFound:
    return NotFound(f"No response with id {response_id[:64]!r} found", param="response_id")


class ResponseStore:
    """The table's reads and writes, each run off the event loop; with ``write_ahead`` (a folder), new
    rows are held there and in memory first (SQLite only)."""

    def __init__(self, engine: Engine, settings: ResponseSettings, write_ahead: Path | None = None) -> None:
        self._engine = engine
        self.settings = settings
        self._held: HeldResponses | None = None
        if write_ahead is not None and engine.dialect.name == "sqlite":
            self._held = HeldResponses(
                write_ahead,
                self._insert,
                interval_s=settings.flush_interval_s,
                max_bytes=settings.max_held_bytes,
            )
        self._sweeper: asyncio.Task[None] | None = None
        # Each tenant's stored bytes as last read (when, how many), plus what this gateway stored
        # since: the room check reads the database at most every USAGE_TTL_S per tenant (another
        # gateway's writes are seen that late: the limit may be passed by what they store meanwhile).
        self._usage: dict[str, tuple[float, int]] = {}

    async def get(self, tenant: str, response_id: str) -> bytes:
        """The tenant's stored response body; :class:`NotFound` if there is none (or it expired)."""
        if self._held is not None and (held := self._held.get(tenant, response_id, time.time())):
            return held.body
        body = await self._run(self._get, tenant, response_id)
        if body is None:
            raise _not_found(response_id)
        return body

    async def added(self, tenant: str, response_id: str) -> bytes:
        """What the tenant's stored response added to its conversation (its input's messages,
        then its answer); :class:`NotFound` if there is none."""
        if self._held is not None and (held := self._held.get(tenant, response_id, time.time())):
            return bytes(held.added)
        added = await self._run(self._added, tenant, response_id)
        if added is None:
            raise _not_found(response_id)
        return bytes(added)

    async def conversation(self, tenant: str, response_id: str) -> list[bytes]:
        """What each turn up to ``response_id`` added, oldest first."""
        chain = self._held_chain(tenant, response_id)
        older = chain[-1].parent if chain else response_id
        if older is not None and not (chain and self._at_limits(chain[-1])):
            total, turns = (chain[-1].total, chain[-1].turns) if chain else (0, 0)
            chain += await self._run(self._chain, tenant, older, total, turns)
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

    def _held_chain(self, tenant: str, response_id: str) -> list[Turn]:
        """The newest turns of the chain that are still held (newest first), within the bounds."""
        chain: list[Turn] = []
        current: str | None = response_id
        now = time.time()
        while self._held is not None and current is not None and not (chain and self._at_limits(chain[-1])):
            row = self._held.get(tenant, current, now)
            if row is None:
                break
            total = row.size + (chain[-1].total if chain else 0)
            chain.append(Turn(row.added, row.parent, total, len(chain) + 1))
            current = row.parent
        return chain

    def _at_limits(self, turn: Turn) -> bool:
        """The chain's walk stops after this turn (as the recursive query's own bounds do)."""
        return turn.turns >= self.settings.max_turns or turn.total > self.settings.max_conversation_bytes

    async def check_room(self, tenant: str) -> None:
        """Before a response that will be stored runs: the tenant's rows have room."""
        read_at, used = self._usage.get(tenant, (0.0, 0))
        if time.monotonic() - read_at > USAGE_TTL_S:
            used = await self._run(self._used, tenant)
            if self._held is not None:  # may count a row just flushed twice: errs towards the limit
                used += self._held.bytes_of(tenant)
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
        row = self._row(tenant, response_id, stored)
        if self._held is not None and not self._held.full:
            self._held.add(row)
        else:
            await self._run(self._insert, [row])
        if tenant in self._usage:
            read_at, used = self._usage[tenant]
            self._usage[tenant] = (read_at, used + len(stored.body) + len(stored.added))

    async def delete(self, tenant: str, response_id: str) -> None:
        if self._held is not None and self._held.holds(response_id):
            await self.flush()  # into the table first, so a restart cannot bring it back
        if not await self._run(self._delete, tenant, response_id):
            raise _not_found(response_id)
        self._usage.pop(tenant, None)  # read again on the next check

    async def flush(self) -> None:
        """The rows written ahead, into the table now (else within ``flush_interval_s``)."""
        if self._held is not None:
            with _storage_errors():
                await self._held.flush()

    async def sweep(self) -> int:
        """Delete the expired rows; how many there were."""
        await self.flush()
        swept = await self._run(self._sweep)
        if swept:
            self._usage.clear()
        return swept

    async def start(self) -> None:
        if self._held is not None:
            if recovered := await self._run(self._held.recover):
                log.info("loaded %d stored responses left in the write-ahead file", recovered)
            self._held.start()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="responses-sweep")

    async def aclose(self) -> None:
        await background.stop(self._sweeper)
        if self._held is not None:
            await self._held.aclose()

    async def _sweep_forever(self) -> None:
        while True:
            try:
                if swept := await self.sweep():
                    log.info("deleted %d expired stored responses", swept)
            except StorageUnavailable as exc:
                log.warning("stored responses not swept: %s", exc)
            await asyncio.sleep(self.settings.sweep_interval_s)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        with _storage_errors():
            return await asyncio.to_thread(fn, *args)

    # -- on a worker thread ----------------------------------------------------------------------

    def _live(self, tenant: str) -> Any:
        return (responses.c.tenant == tenant) & (responses.c.expires_at > time.time())

    def _get(self, tenant: str, response_id: str) -> bytes | None:
        query = select(responses.c.body).where(responses.c.id == response_id, self._live(tenant))
        with self._engine.connect() as conn:
            return conn.execute(query).scalar()

    def _added(self, tenant: str, response_id: str) -> bytes | None:
        query = select(responses.c.added).where(responses.c.id == response_id, self._live(tenant))
        with self._engine.connect() as conn:
            return conn.execute(query).scalar()

    def _chain(self, tenant: str, response_id: str, total: int = 0, turns: int = 0) -> list[Turn]:
        """The rows from ``response_id`` back to the first (newest first), with each one's parent;
        it stops at ``max_turns`` rows, or at the first row past ``max_conversation_bytes``, counting
        ``total`` bytes and ``turns`` rows (newer, held) before it."""
        r = responses.c
        start = select(
            r.id, r.parent, r.added, (r.size + total).label("total"), literal(turns + 1).label("turns")
        )
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

    def _row(self, tenant: str, response_id: str, stored: Stored) -> HeldRow:
        now = time.time()
        size = len(stored.body) + len(stored.added)
        expires = now + self.settings.retention_s
        return HeldRow(
            id=response_id,
            tenant=tenant,
            parent=stored.parent,
            created_at=now,
            expires_at=expires,
            size=size,
            body=stored.body,
            added=stored.added,
        )

    def _insert(self, rows: list[HeldRow]) -> None:
        """Rows into the table; on SQLite a row already there (a write-ahead file loaded twice) is
        skipped, and the driver's own executemany runs it: through SQLAlchemy's parameter handling 300
        rows took ~11 ms of CPU against ~6 ms (this machine), beside the event loop."""
        with self._engine.begin() as conn:
            if self._engine.dialect.name == "sqlite":
                conn.exec_driver_sql(_SQLITE_INSERT, [msgspec.structs.astuple(row) for row in rows])
            else:
                conn.execute(responses.insert(), [msgspec.structs.asdict(row) for row in rows])

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
