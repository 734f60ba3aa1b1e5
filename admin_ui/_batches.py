"""The batches page: the batches of every tenant the operator sees (a tenant admin: their tenants'),
newest first, with their progress, an estimate of the time left (lines done so far over the time they
took), and what their lines have cost so far (their ledger rows, tagged ``batch``, as loaded into the
database).  ``/admin/data/batches`` is the same as JSON."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.response import Template

from admin_ui._context import SECURITY_HEADERS, UI, page, services
from admin_ui._guard import AnyRequest, operator
from gateway.accounts.batches import BatchRecord, BatchStore
from gateway.accounts.ledger import NANO
from gateway.accounts.tenants import Caller
from gateway.wire.chat import encode

SHOWN = 50


def _row(store: BatchStore, batch: BatchRecord, now: float) -> dict[str, Any]:
    done = batch.completed + batch.failed
    eta = None
    started = batch.in_progress_at
    if batch.status == "in_progress" and started is not None and 0 < done < batch.total:
        eta = (batch.total - done) * (now - started) / done
    return {
        "id": batch.id,
        "tenant": batch.tenant,
        "endpoint": batch.endpoint,
        "status": batch.status,
        "total": batch.total,
        "completed": batch.completed,
        "failed": batch.failed,
        "progress": done / batch.total if batch.total else 0.0,
        "eta_s": eta,
        "cost_usd": store.cost_nusd(batch.id) / NANO,
        "created_at": batch.created_at,
    }


def batches_state(store: BatchStore | None, caller: Caller) -> dict[str, Any]:
    """The batches ``caller`` may see. Blocking (the database): run it in a thread."""
    if store is None:
        return {"enabled": False, "batches": []}
    if caller.sees_all:
        found, _ = store.listed(None, SHOWN, None)
    else:  # each of their tenants' newest, then the newest of those
        mine = [b for tenant in caller.tenant_names for b in store.listed(tenant, SHOWN, None)[0]]
        found = sorted(mine, key=lambda b: (b.created_at, b.id), reverse=True)[:SHOWN]
    now = time.time()
    return {"enabled": True, "batches": [_row(store, b, now) for b in found]}


@get("/batches", name="admin_ui:batches")
async def batches_page(request: AnyRequest, ui: NamedDependency[UI]) -> Template:
    op = await operator(request, ui.sessions)
    state = await asyncio.to_thread(batches_state, services(request).batches, op.caller)
    return page(op, "batches.html", title="Batches", nav="batches", batches=state)


@get("/data/batches", name="admin_ui:batches_data")
async def batches_data(request: AnyRequest, ui: NamedDependency[UI]) -> Response[bytes]:
    op = await operator(request, ui.sessions, page=False)
    state = await asyncio.to_thread(batches_state, services(request).batches, op.caller)
    return Response(encode(state), media_type="application/json", headers=SECURITY_HEADERS)


BATCH_ROUTES = [batches_page, batches_data]
