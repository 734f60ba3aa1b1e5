"""Stored responses (the Responses API's ``store``), per tenant, in the gateway's database.

Each row keeps a response as it was answered (for ``GET /v1/responses/{id}``) and the whole
conversation it ends (``thread``: the chat messages, without the instructions), so that continuing it
with ``previous_response_id`` reads one row however long the chain of responses before it.  Rows
expire after ``retention_s``; a tenant's rows together stay under ``max_bytes_per_tenant`` (a request
that would store more is refused before it runs, so nothing answered is lost), and one conversation
under ``max_bytes_per_response``.  Every lookup names the tenant: another tenant's id is not found.
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
from sqlalchemy import Engine, delete, func, select
from sqlalchemy.exc import SQLAlchemyError

from gateway.accounts.storage import responses
from gateway.errors import InvalidRequest, NotFound, RateLimited, StorageUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class ResponseSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # How long a stored response can be read or continued (OpenAI keeps them 30 days).
    retention_s: float = 30 * 86400
    # The most one stored conversation (its messages and the answer) may take.
    max_bytes_per_response: int = 4 << 20
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
    thread: bytes  # the conversation it ends (JSON chat messages)


def _not_found(response_id: str) -> NotFound:
    return NotFound(f"No response with id {response_id[:64]!r} found", param="response_id")


class ResponseStore:
    """The table's reads and writes, each run off the event loop."""

    def __init__(self, engine: Engine, settings: ResponseSettings) -> None:
        self._engine = engine
        self.settings = settings
        self._sweeper: asyncio.Task[None] | None = None

    async def get(self, tenant: str, response_id: str) -> Stored:
        """The tenant's stored response; :class:`NotFound` if there is none (or it expired)."""
        row = await self._run(self._get, tenant, response_id)
        if row is None:
            raise _not_found(response_id)
        return row

    async def check_room(self, tenant: str, thread_bytes: int, param: str) -> None:
        """Before a response that will be stored runs: its conversation fits one row, and the
        tenant's rows have room for it."""
        limit = self.settings.max_bytes_per_response
        if thread_bytes > limit:
            raise InvalidRequest(
                f"the conversation takes {thread_bytes} bytes, over the {limit} a stored response may; "
                "start a new one, or send store: false",
                param=param,
            )
        used = await self._run(self._used, tenant)
        if used + thread_bytes > self.settings.max_bytes_per_tenant:
            raise StoreFull(
                f"this tenant's stored responses take {used} bytes, at its limit of "
                f"{self.settings.max_bytes_per_tenant}; delete some (DELETE /v1/responses/{{id}}), "
                "or send store: false",
                retry_after_s=60,
                reason="stored_responses",
            )

    async def put(self, tenant: str, response_id: str, stored: Stored) -> None:
        await self._run(self._put, tenant, response_id, stored)

    async def delete(self, tenant: str, response_id: str) -> None:
        if not await self._run(self._delete, tenant, response_id):
            raise _not_found(response_id)

    async def sweep(self) -> int:
        """Delete the expired rows; how many there were."""
        return await self._run(self._sweep)

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

    def _get(self, tenant: str, response_id: str) -> Stored | None:
        query = select(responses.c.body, responses.c.thread).where(
            responses.c.id == response_id,
            responses.c.tenant == tenant,
            responses.c.expires_at > time.time(),
        )
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else Stored(row.body, row.thread)

    def _used(self, tenant: str) -> int:
        query = select(func.coalesce(func.sum(responses.c.size), 0)).where(
            responses.c.tenant == tenant, responses.c.expires_at > time.time()
        )
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def _put(self, tenant: str, response_id: str, stored: Stored) -> None:
        now = time.time()
        row = {
            "id": response_id,
            "tenant": tenant,
            "created_at": now,
            "expires_at": now + self.settings.retention_s,
            "size": len(stored.body) + len(stored.thread),
            "body": stored.body,
            "thread": stored.thread,
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
