"""The cost report: per tenant (or all), per day, by tier, by model or by a cost tag's value
(``tag:team``), optionally only requests with one tag (``team=search``), against the all-cloud
counterfactual; a chart (drawn in the browser from ``/admin/data/costs``), tables, and CSV."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from litestar import Response, get
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Template

from admin_ui._context import SECURITY_HEADERS, UI, page, services
from admin_ui._guard import AnyRequest, Operator, operator
from gateway.accounts.ledger import report_csv, valid_tag_key
from gateway.errors import GatewayError, InvalidRequest
from gateway.wire.chat import encode

SPLITS = ("tier", "model", "key")  # key: the API key's id
TAG = "tag:"  # by=tag:<key>: split by the value of one cost tag
DEFAULT_DAYS = 30


@dataclass(frozen=True, slots=True)
class CostQuery:
    tenant: str  # "" for every tenant
    since: str
    until: str
    by: str
    tag: str = ""  # only requests with this cost tag (key=value); "": all

    @classmethod
    def of(
        cls,
        tenant: str | None,
        since: str | None,
        until: str | None,
        by: str | None,
        tag: str | None = None,
    ) -> CostQuery:
        today = dt.datetime.now(dt.UTC).date()
        by = (by or "tier").strip()
        if by not in SPLITS and not (by.startswith(TAG) and valid_tag_key(by[len(TAG) :])):
            raise InvalidRequest(f"split by one of: {', '.join(SPLITS)}, or {TAG}<key>", param="by")
        return cls(
            tenant=(tenant or "").strip(),
            since=(since or str(today - dt.timedelta(days=DEFAULT_DAYS - 1))).strip(),
            until=(until or str(today)).strip(),
            by=by,
            tag=(tag or "").strip(),
        )

    @property
    def params(self) -> str:
        fields = {"tenant": self.tenant, "since": self.since, "until": self.until, "by": self.by}
        return urlencode(fields | ({"tag": self.tag} if self.tag else {}))

    @property
    def label(self) -> str:
        """What the split is called on the page: ``team`` for ``tag:team``."""
        return self.by.removeprefix(TAG)


async def report(request: AnyRequest, op: Operator, q: CostQuery, group_by: str) -> dict[str, Any]:
    admin = services(request).admin
    return await admin.cost_report(op.caller, q.tenant or None, q.since, q.until, group_by, q.tag or None)


def scoped(op: Operator, tenant: str | None) -> str | None:
    """A tenant admin's report is of one of their tenants (the first, unless they chose)."""
    if tenant or op.caller.sees_all or not op.caller.tenant_names:
        return tenant
    return op.caller.tenant_names[0]


@get("/costs", name="admin_ui:costs")
async def costs_page(
    request: AnyRequest,
    ui: NamedDependency[UI],
    tenant: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    by: FromQuery[str | None] = None,
    tag: FromQuery[str | None] = None,
) -> Template:
    op = await operator(request, ui.sessions)
    tenant = scoped(op, tenant)
    tenants = await services(request).admin.tenants(op.caller)
    q = CostQuery(tenant or "", since or "", until or "", by or "tier", tag or "")
    error: dict[str, str] = {}
    by_day = per_split = per_tenant = None
    try:
        q = CostQuery.of(tenant, since, until, by, tag)
        by_day = await report(request, op, q, f"day,{q.by}")
        per_split = await report(request, op, q, q.by)
        per_tenant = await report(request, op, q, "tenant") if not q.tenant else None
    except GatewayError as exc:
        error[exc.param or "tenant"] = exc.message
    return page(
        op,
        "costs.html",
        title="Costs",
        nav="costs",
        q=q,
        tenants=tenants,
        splits=_splits(q, by_day),
        report=by_day,
        per_split=per_split,
        per_tenant=per_tenant,
        errors=error,
        status=400 if error else 200,
    )


def _splits(q: CostQuery, report: dict[str, Any] | None) -> list[str]:
    """The split selector's choices: tier, model, then the tag keys of the period's requests."""
    tags = [TAG + key for key in (report or {}).get("tag_keys", [])]
    if q.by.startswith(TAG) and q.by not in tags:
        tags.append(q.by)
    return [*SPLITS, *tags]


@get("/data/costs", name="admin_ui:costs_data")
async def costs_data(
    request: AnyRequest,
    ui: NamedDependency[UI],
    tenant: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    by: FromQuery[str | None] = None,
    tag: FromQuery[str | None] = None,
) -> Response[bytes]:
    op = await operator(request, ui.sessions, page=False)
    q = CostQuery.of(scoped(op, tenant), since, until, by, tag)
    body = await report(request, op, q, f"day,{q.by}")
    return Response(encode(body | {"by": q.by}), media_type="application/json", headers=SECURITY_HEADERS)


@get("/costs.csv", name="admin_ui:costs_csv")
async def costs_csv(
    request: AnyRequest,
    ui: NamedDependency[UI],
    tenant: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    by: FromQuery[str | None] = None,
    tag: FromQuery[str | None] = None,
) -> Response[bytes]:
    op = await operator(request, ui.sessions, page=False)
    q = CostQuery.of(scoped(op, tenant), since, until, by, tag)
    groups = f"day,{q.by}" if q.tenant else f"day,tenant,{q.by}"
    body = report_csv(await report(request, op, q, groups)).encode()
    name = re.sub(r"[^A-Za-z0-9._-]", "_", f"tiergate-costs-{q.tenant or 'all'}-{q.since}-{q.until}.csv")
    headers = SECURITY_HEADERS | {"Content-Disposition": f'attachment; filename="{name}"'}
    return Response(body, media_type="text/csv; charset=utf-8", headers=headers)


COST_ROUTES = [costs_page, costs_data, costs_csv]
