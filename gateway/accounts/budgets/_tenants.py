"""Tenants' spend in their budget period, from the ledger, for the router's policy check.

The request path reads a number from memory (:meth:`BudgetBook.spend`); a background task
re-sums the ledger (one indexed query per tenant with a budget) every ``refresh_s``.  So a
burst can overshoot a budget by what it spends within that time plus the ledger's own
flush delay (``ledger.flush_interval_s``).  Periods are UTC calendar days, ISO weeks
(from Monday) and months.

A policy's ``tag_budgets`` are read the same way (one indexed query on ``ledger_tags`` per tag
budget): a request carrying a tag whose budget is spent is governed by that budget instead of the
tenant's (:meth:`BudgetBook.governing`), so the router refuses it or sends it to the cheapest tier
as ``budget.on_exhausted`` says.  The request's tags reach the router in its features
(:attr:`router.Features.tags`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping

import msgspec
from sqlalchemy import Engine, func, select

import router
from gateway.accounts.ledger import NANO
from gateway.accounts.storage import ledger, ledger_tags, tenants
from gateway.ops.background import background_thread

log = logging.getLogger(__name__)

TENANT_BUDGET = ""  # the key of the tenant's own budget among its sums; a tag budget's is its tag


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


def spent_tag_usd(engine: Engine, tenant: str, tag: tuple[str, str], since: float) -> float:
    """The ledger costs since ``since`` of the tenant's requests carrying ``tag``, in USD."""
    key, value = tag
    query = (
        select(func.coalesce(func.sum(ledger.c.cost_nusd), 0))
        .select_from(
            ledger_tags.join(tenants, tenants.c.id == ledger_tags.c.tenant_id).join(
                ledger, ledger.c.entry_id == ledger_tags.c.entry_id
            )
        )
        .where(
            tenants.c.name == tenant,
            ledger_tags.c.key == key,
            ledger_tags.c.value == value,
            ledger_tags.c.ts >= since,
        )
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
        # (tenant, TENANT_BUDGET or a tag) → (period, period start, USD spent); they appear once
        # a request needs them.
        self._spent: dict[tuple[str, str], tuple[str, float, float]] = {}
        self._task: asyncio.Task[None] | None = None
        self._reader = background_thread("budget-refresh")  # lowest priority: see gateway.ops.background

    def spend(self, tenant: str, policy: router.TenantPolicy) -> router.Spend | None:
        """The tenant's spend in its policy's current period (None: no budget, or not read yet)."""
        if policy.budget.amount_usd <= 0:
            return None
        return self._known((tenant, TENANT_BUDGET), policy.budget.period)

    def governing(
        self, tenant: str, policy: router.TenantPolicy, tags: Mapping[str, str] | None
    ) -> tuple[router.TenantPolicy, router.Spend | None, str | None]:
        """The policy to route a request with ``tags`` by, the spend against its budget, and the tag
        whose budget that is: the tenant's own (None), unless a tag budget of one of its tags is
        spent; then that one (with the tenant budget's ``on_exhausted``)."""
        for budget in policy.tag_budgets:
            key, value = budget.pair
            if tags is None or tags.get(key) != value:
                continue
            spend = self._known((tenant, budget.tag), budget.period)
            if spend is not None and spend.spent_usd >= budget.amount_usd:
                spent = router.Budget(
                    amount_usd=budget.amount_usd,
                    period=budget.period,
                    on_exhausted=policy.budget.on_exhausted,
                )
                return msgspec.structs.replace(policy, budget=spent), spend, budget.tag
        return policy, self.spend(tenant, policy), None

    def _known(self, which: tuple[str, str], period: str) -> router.Spend | None:
        now = self._clock()
        start, end = period_bounds(period, now)
        known = self._spent.get(which)
        if known is None or known[0] != period or known[1] != start:
            self._spent.setdefault(which, (period, start, -1.0))
            return None  # read on the next refresh (a new period starts at zero spend anyway)
        return router.Spend(max(known[2], 0.0), end - now)

    async def refresh(self) -> None:
        loop = asyncio.get_running_loop()
        for which in list(self._spent):
            tenant, tag = which
            policy = self._policy_of(tenant)
            if tag == TENANT_BUDGET:
                if policy.budget.amount_usd <= 0:
                    continue
                period = policy.budget.period
                start, _ = period_bounds(period, self._clock())
                spent = await loop.run_in_executor(self._reader, spent_usd, self._engine, tenant, start)
            else:
                budget = next((b for b in policy.tag_budgets if b.tag == tag), None)
                if budget is None:  # the policy no longer has it
                    del self._spent[which]
                    continue
                period = budget.period
                start, _ = period_bounds(period, self._clock())
                spent = await loop.run_in_executor(
                    self._reader, spent_tag_usd, self._engine, tenant, budget.pair, start
                )
            self._spent[which] = (period, start, spent)

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
