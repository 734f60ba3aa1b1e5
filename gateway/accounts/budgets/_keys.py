"""Keys' own budgets (per UTC day and month, in USD), from the ledger's costs.

A key with a budget has its spend read from the ledger at most every ``refresh_s`` (2 s): one indexed
query per budgeted key in use (``ix_ledger_tenant_ts`` on the key's tenant and the month's start, then
the key id), run in a thread; requests arriving while it runs wait for that one read.  Between reads
the spend is the last one read, so, like the tenant budget (gateway/accounts/budgets/_tenants.py), a burst can
overshoot a key's budget by what it spends in ``refresh_s`` plus the ledger's flush delay
(``ledger.flush_interval_s``).  A key at its budget is refused with OpenAI's quota error (429
insufficient_quota; Retry-After: the seconds to the next UTC day or month) while the tenant's other
keys go on.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, case, func, select

from gateway.accounts.budgets._tenants import period_bounds
from gateway.accounts.ledger import NANO
from gateway.accounts.storage import ledger
from gateway.accounts.tenants import Caller
from gateway.errors import QuotaExceeded

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KeySpend:
    read_at: float
    day_start: float
    month_start: float
    day_usd: float
    month_usd: float


def spent_by_key(
    engine: Engine, tenant_id: int, key_id: str, day_start: float, month_start: float
) -> tuple[float, float]:
    """The key's ledger costs since ``day_start`` and since ``month_start``, in USD."""
    since = min(day_start, month_start)
    today = func.sum(case((ledger.c.ts >= day_start, ledger.c.cost_nusd), else_=0))
    month = func.sum(case((ledger.c.ts >= month_start, ledger.c.cost_nusd), else_=0))
    query = select(func.coalesce(today, 0), func.coalesce(month, 0)).where(
        ledger.c.tenant_id == tenant_id, ledger.c.ts >= since, ledger.c.key_id == key_id
    )
    with engine.connect() as conn:
        day, mon = conn.execute(query).one()
    return int(day or 0) / NANO, int(mon or 0) / NANO


class KeyBudgets:
    def __init__(
        self, engine: Engine, refresh_s: float = 2.0, clock: Callable[[], float] = time.time
    ) -> None:
        self._engine = engine
        self._refresh_s = refresh_s
        self._clock = clock
        self._spent: dict[str, KeySpend] = {}
        self._reading: dict[str, asyncio.Task[KeySpend]] = {}

    async def check(self, caller: Caller) -> None:
        """429 when the caller's key has spent its day's or its month's budget."""
        limits = caller.limits
        if not limits.budgeted or caller.tenant is None:
            return
        now = self._clock()
        day_start, day_end = period_bounds("day", now)
        month_start, month_end = period_bounds("month", now)
        known = self._spent.get(caller.key_id)
        stale = known is None or now - known.read_at >= self._refresh_s or known.day_start != day_start
        if stale:
            known = await self._read(caller, now, day_start, month_start, known)
        if known is None:
            return  # never read (the database away): the tenant's own limits still hold
        if limits.budget_day_usd and known.day_usd >= limits.budget_day_usd:
            raise _over(caller.key_id, known.day_usd, limits.budget_day_usd, "day", day_end - now)
        if limits.budget_month_usd and known.month_usd >= limits.budget_month_usd:
            raise _over(caller.key_id, known.month_usd, limits.budget_month_usd, "month", month_end - now)

    async def _read(
        self, caller: Caller, now: float, day_start: float, month_start: float, last: KeySpend | None
    ) -> KeySpend | None:
        key_id = caller.key_id
        task = self._reading.get(key_id)
        if task is None:
            assert caller.tenant is not None
            tenant_id = caller.tenant.id

            async def read() -> KeySpend:
                day, month = await asyncio.to_thread(
                    spent_by_key, self._engine, tenant_id, key_id, day_start, month_start
                )
                return KeySpend(now, day_start, month_start, day, month)

            task = self._reading[key_id] = asyncio.ensure_future(read())
            task.add_done_callback(lambda _: self._reading.pop(key_id, None))
        try:
            spend = await asyncio.shield(task)
        except Exception as exc:  # the database away: the last sums, retried on the next request
            log.warning("key %s: its spend could not be read, keeping the last: %s", key_id, exc)
            return last
        self._spent[key_id] = spend
        return spend


def _over(key_id: str, spent: float, amount: float, period: str, retry_after_s: float) -> QuotaExceeded:
    return QuotaExceeded(
        f"key {key_id} has spent ${spent:.4f} of its ${amount:g} this {period}",
        retry_after_s=retry_after_s,
        reason="key_budget",
    )
