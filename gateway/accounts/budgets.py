"""Tenants' spend in their budget period, from the ledger, for the router's policy check.

The request path reads a number from memory (:meth:`BudgetBook.spend`); a background task
re-sums the ledger (one indexed query per tenant with a budget) every ``refresh_s``.  So a
burst can overshoot a budget by what it spends within that time plus the ledger's own
flush delay (``ledger.flush_interval_s``).  Periods are UTC calendar days, ISO weeks
(from Monday) and months.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable

from sqlalchemy import Engine, func, select

import router
from gateway.accounts.ledger import NANO
from gateway.accounts.storage import ledger, tenants
from gateway.ops.background import background_thread

log = logging.getLogger(__name__)


def period_bounds(period: str, now: float) -> tuple[float, float]:
    """Start and end (epoch seconds) of the UTC ``period`` containing ``now``."""
    day = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        start, end = day, day + dt.timedelta(days=1)
    elif period == "week":
        start = day - dt.timedelta(days=day.weekday())
        end = start + dt.timedelta(days=7)
    elif period == "month":
        start = day.replace(day=1)
        end = (start + dt.timedelta(days=32)).replace(day=1)
    else:
        raise ValueError(f"unknown budget period {period!r}")
    return start.timestamp(), end.timestamp()


def spent_usd(engine: Engine, tenant: str, since: float) -> float:
    """The tenant's ledger costs since ``since``, in USD."""
    query = (
        select(func.coalesce(func.sum(ledger.c.cost_nusd), 0))
        .select_from(ledger.join(tenants, tenants.c.id == ledger.c.tenant_id))
        .where(tenants.c.name == tenant, ledger.c.ts >= since)
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar() or 0) / NANO


class BudgetBook:
    def __init__(
        self,
        engine: Engine,
        policy_of: Callable[[str], router.TenantPolicy],
        refresh_s: float = 2.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._engine = engine
        self._policy_of = policy_of
        self._refresh_s = refresh_s
        self._clock = clock
        # tenant → (period, period start, USD spent); tenants appear once they send a request.
        self._spent: dict[str, tuple[str, float, float]] = {}
        self._task: asyncio.Task[None] | None = None
        self._reader = background_thread("budget-refresh")  # lowest priority: see gateway.ops.background

    def spend(self, tenant: str, policy: router.TenantPolicy) -> router.Spend | None:
        """The tenant's spend in its policy's current period (None: no budget, or not read yet)."""
        budget = policy.budget
        if budget.amount_usd <= 0:
            return None
        now = self._clock()
        start, end = period_bounds(budget.period, now)
        known = self._spent.get(tenant)
        if known is None or known[0] != budget.period or known[1] != start:
            self._spent.setdefault(tenant, (budget.period, start, -1.0))
            return None  # read on the next refresh (a new period starts at zero spend anyway)
        return router.Spend(max(known[2], 0.0), end - now)

    async def refresh(self) -> None:
        for tenant in list(self._spent):
            budget = self._policy_of(tenant).budget
            if budget.amount_usd <= 0:
                continue
            start, _ = period_bounds(budget.period, self._clock())
            loop = asyncio.get_running_loop()
            spent = await loop.run_in_executor(self._reader, spent_usd, self._engine, tenant, start)
            self._spent[tenant] = (budget.period, start, spent)

    async def start(self) -> None:
        self._task = asyncio.create_task(self._poll(), name="budget-refresh")

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.refresh()
            except Exception:
                log.exception("budgets: reading the ledger failed; keeping the last sums")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._reader.shutdown(wait=False)
