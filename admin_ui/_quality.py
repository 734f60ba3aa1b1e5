"""The quality page: per tenant and tier, how often its answers were acceptable, hour by hour, and
what the labels came from (feedback, re-asks, abandoned streams, ...): what the router's quality model
learned from (router/_learning/quality.py; the same as ``GET /admin/api/quality``)."""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Template

from admin_ui._context import UI, page, services
from admin_ui._guard import AnyRequest, operator
from gateway.accounts.tenants import check_read

HOURS_SHOWN = 24


def quality_state(request: AnyRequest, tenant: str | None) -> dict[str, Any]:
    running = services(request)
    rows = running.routing.quality(tenant)
    for row in rows:
        row["hours"] = row["hours"][-HOURS_SHOWN:]
    sources = running.outcomes.report(tenant) if running.outcomes is not None else []
    return {"tenant": tenant or "", "rows": rows, "sources": sources}


@get("/quality", name="admin_ui:quality")
async def quality_page(
    request: AnyRequest, ui: NamedDependency[UI], tenant: FromQuery[str | None] = None
) -> Template:
    op = await operator(request, ui.sessions)
    check_read(op.caller, None, "the quality report is")
    state = quality_state(request, (tenant or "").strip() or None)
    return page(op, "quality.html", title="Quality", nav="quality", quality=state)


QUALITY_ROUTES = [quality_page]
