"""The policies the request path reads: an in-memory copy of the store, kept current.

A change made through this book takes effect on the very next request in this process.
Changes made by another gateway on the same database are seen within ``refresh_s``: a
background task compares the store's change stamp (one indexed ``max(id)``) and reloads
the table when it moved.  The request path itself never touches the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging

import router
from gateway.accounts.audit import SYSTEM_ACTOR, Actor
from gateway.accounts.policies._store import DEFAULT_KEY, PolicyChange, PolicyRecord, PolicyStore
from gateway.ops.background import background_thread

log = logging.getLogger(__name__)


class PolicyBook:
    def __init__(self, store: PolicyStore, refresh_s: float = 1.0) -> None:
        self.store = store
        self._refresh_s = refresh_s
        self._policies: dict[str, router.TenantPolicy] = {}
        self._default = store.configured_default
        self._stamp = -1
        self._task: asyncio.Task[None] | None = None
        self._reader = background_thread("policy-refresh")  # lowest priority: see gateway.ops.background

    async def start(self) -> None:
        await self.reload()
        self._task = asyncio.create_task(self._poll(), name="policy-refresh")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._reader.shutdown(wait=False)

    def policy(self, tenant: str) -> router.TenantPolicy:
        """The policy a tenant's request is routed by now (no I/O)."""
        return self._policies.get(tenant, self._default)

    async def reload(self) -> None:
        loop = asyncio.get_running_loop()
        stamp = await loop.run_in_executor(self._reader, self.store.stamp)
        if stamp == self._stamp:
            return
        current = await loop.run_in_executor(self._reader, self.store.current)
        policies = {tenant: policy for tenant, (_, policy) in current.items()}
        self._default = policies.pop(DEFAULT_KEY, self.store.configured_default)
        self._policies = policies
        self._stamp = stamp

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.reload()
            except Exception:
                log.exception("policies: reload failed; keeping the last ones read")

    # -- reads and edits (the admin API and the admin UI go through these) ----------------

    async def get(self, tenant: str) -> PolicyRecord:
        return await asyncio.to_thread(self.store.get, tenant)

    async def set(
        self,
        tenant: str,
        policy: router.TenantPolicy,
        who: str,
        expected_version: int | None = None,
        *,
        actor: Actor = SYSTEM_ACTOR,
    ) -> PolicyRecord:
        record = await asyncio.to_thread(
            functools.partial(self.store.set, expected_version=expected_version, actor=actor),
            tenant,
            policy,
            who,
        )
        await self.reload()
        return record

    async def rollback(
        self, tenant: str, to_version: int, who: str, *, actor: Actor = SYSTEM_ACTOR
    ) -> PolicyRecord:
        record = await asyncio.to_thread(
            functools.partial(self.store.rollback, actor=actor), tenant, to_version, who
        )
        await self.reload()
        return record

    async def history(self, tenant: str, limit: int = 100) -> list[PolicyChange]:
        return await asyncio.to_thread(self.store.history, tenant, limit)
