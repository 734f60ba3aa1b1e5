"""Cost reports from the ledger: sums per day/tier/model (and tenant) or the value of a cost tag
(``tag:team``), with the all-cloud counterfactual and the savings against it, optionally only rows
carrying one tag (``team=search``).  Costs are summed as integers (nano-USD), so totals equal the
sum of the rows exactly; grouped by a tag, rows without it are one group (``None``), so the groups
add up to the total too."""

from __future__ import annotations

import csv
import datetime as dt
import io
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Engine, Table, and_, case, func, select
from sqlalchemy.sql import FromClause

from gateway.accounts.ledger._pricing import NANO
from gateway.accounts.ledger._tags import parse_filter, valid_key
from gateway.accounts.storage import ledger, ledger_tags, tenants
from gateway.errors import InvalidRequest

GROUPS = {
    "day": ledger.c.day,
    "tier": ledger.c.tier,
    "model": ledger.c.model_used,
    "endpoint": ledger.c.endpoint,
    "tenant": tenants.c.name,
    "key": ledger.c.key_id,  # the API key's id (every row has one: the key that made the request)
}
FORMATS = ("json", "csv")
TAG = "tag:"  # group_by=tag:<key>: by the value of one cost tag
MAX_TAG_GROUPS = 4
MAX_TAG_KEYS = 100


@dataclass(frozen=True, slots=True)
class ReportQuery:
    tenant: str | None  # None: every tenant (admins only)
    since: float | None
    until: float | None
    group_by: tuple[str, ...]
    tag: tuple[str, str] | None = None  # only rows carrying this tag (key, value)

    @classmethod
    def parse(
        cls,
        tenant: str | None,
        since: str | None,
        until: str | None,
        group_by: str | None,
        tag: str | None = None,
    ) -> ReportQuery:
        """Validate report parameters as a user typed them; 400 naming the bad one."""
        groups = tuple(g.strip() for g in (group_by or "").split(",") if g.strip())
        unknown = [g for g in groups if g not in GROUPS and not _tag_group(g)]
        if unknown:
            raise InvalidRequest(
                f"cannot group by {', '.join(unknown)}; choose from {', '.join(GROUPS)} "
                f"or {TAG}<key> (a cost tag's key)",
                param="group_by",
            )
        if len(set(groups)) != len(groups):
            raise InvalidRequest("group_by names a column twice", param="group_by")
        if sum(g.startswith(TAG) for g in groups) > MAX_TAG_GROUPS:
            raise InvalidRequest(f"group_by names more than {MAX_TAG_GROUPS} tags", param="group_by")
        start, end = _instant(since, "since", end=False), _instant(until, "until", end=True)
        if start is not None and end is not None and end <= start:
            raise InvalidRequest("until must be after since", param="until")
        return cls(tenant or None, start, end, groups, parse_filter(tag) if tag else None)


def _tag_group(group: str) -> bool:
    return group.startswith(TAG) and valid_key(group[len(TAG) :])


def _instant(text: str | None, param: str, *, end: bool) -> float | None:
    """An ISO date or date-time (UTC unless it says otherwise). A bare ``until`` date
    includes that whole day."""
    if not text:
        return None
    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text)
            moment = dt.datetime.combine(day + dt.timedelta(days=1 if end else 0), dt.time(), dt.UTC)
        else:
            moment = dt.datetime.fromisoformat(text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=dt.UTC)
    except ValueError as exc:
        raise InvalidRequest(
            f"{param} must be an ISO date (2026-01-31) or date-time (2026-01-31T12:00:00Z): {text!r}",
            param=param,
        ) from exc
    return moment.timestamp()


def cost_report(engine: Engine, query: ReportQuery, tenant_id: int | None) -> dict[str, Any]:
    """The report for one tenant (``tenant_id``) or all (None)."""
    base: FromClause = ledger.outerjoin(tenants, tenants.c.id == ledger.c.tenant_id)
    keys: list[ColumnElement[Any]] = []
    for group in query.group_by:
        if group in GROUPS:
            keys.append(GROUPS[group].label(group))
            continue
        # One outer join per tag key: a row has the key at most once, so it is counted once.
        tag = ledger_tags.alias(f"tag_{len(keys)}")
        on = and_(tag.c.entry_id == ledger.c.entry_id, tag.c.key == group[len(TAG) :])
        base = base.outerjoin(tag, on)
        keys.append(tag.c.value.label(group))
    measures = [
        func.count().label("requests"),
        func.coalesce(func.sum(case((ledger.c.status == 200, 1), else_=0)), 0).label("answered"),
        func.coalesce(func.sum(ledger.c.prompt_tokens), 0).label("prompt_tokens"),
        func.coalesce(func.sum(ledger.c.completion_tokens), 0).label("completion_tokens"),
        func.coalesce(func.sum(ledger.c.cost_nusd), 0).label("cost_nusd"),
        func.coalesce(func.sum(ledger.c.counterfactual_nusd), 0).label("counterfactual_nusd"),
    ]
    where = _where(query, tenant_id)
    grouped = select(*keys, *measures).select_from(base).where(*where)
    if keys:
        # Rows without a tag (NULL) sort last on both databases.
        grouped = grouped.group_by(*keys).order_by(*(k.is_(None) for k in keys), *keys)
    total = select(*measures).select_from(ledger.outerjoin(tenants, tenants.c.id == ledger.c.tenant_id))
    total = total.where(*where)
    with engine.connect() as conn:
        rows = [_amounts(dict(r._mapping)) for r in conn.execute(grouped)] if keys else []
        totals = _amounts(dict(conn.execute(total).one()._mapping))
        known = conn.execute(_tag_keys(query, tenant_id)).scalars().all()
    return {
        "tenant": query.tenant,
        "since": _iso(query.since),
        "until": _iso(query.until),
        "group_by": list(query.group_by),
        "tag": "=".join(query.tag) if query.tag else None,
        "rows": rows,
        "total": totals,
        "tag_keys": list(known),  # the tag keys in the period (first 100), to group by
    }


def _tag_keys(query: ReportQuery, tenant_id: int | None) -> Any:
    keys = select(ledger_tags.c.key).distinct().where(*_bounds(ledger_tags, query, tenant_id))
    return keys.order_by(ledger_tags.c.key).limit(MAX_TAG_KEYS)


def _bounds(table: Table, query: ReportQuery, tenant_id: int | None) -> list[ColumnElement[bool]]:
    """The tenant and time range, on ``ledger`` or ``ledger_tags`` (both have tenant_id and ts)."""
    where: list[ColumnElement[bool]] = []
    if tenant_id is not None:
        where.append(table.c.tenant_id == tenant_id)
    if query.since is not None:
        where.append(table.c.ts >= query.since)
    if query.until is not None:
        where.append(table.c.ts < query.until)
    return where


def _where(query: ReportQuery, tenant_id: int | None) -> list[ColumnElement[bool]]:
    where = _bounds(ledger, query, tenant_id)
    if query.tag is not None:
        # The rows carrying the tag, from ledger_tags' (tenant, key, value, ts) index.
        key, value = query.tag
        tagged = [
            ledger_tags.c.key == key,
            ledger_tags.c.value == value,
            *_bounds(ledger_tags, query, tenant_id),
        ]
        where.append(ledger.c.entry_id.in_(select(ledger_tags.c.entry_id).where(*tagged)))
    return where


def _amounts(row: dict[str, Any]) -> dict[str, Any]:
    for name in ("requests", "answered", "prompt_tokens", "completion_tokens", "cost_nusd"):
        row[name] = int(row[name])
    row["counterfactual_nusd"] = int(row["counterfactual_nusd"])
    row["savings_nusd"] = row["counterfactual_nusd"] - row["cost_nusd"]
    for name in ("cost", "counterfactual", "savings"):
        row[f"{name}_usd"] = row[f"{name}_nusd"] / NANO
    return row


def _iso(ts: float | None) -> str | None:
    return None if ts is None else dt.datetime.fromtimestamp(ts, dt.UTC).isoformat()


def report_csv(report: dict[str, Any]) -> str:
    """The report's rows as CSV, then a ``total`` row."""
    groups: list[str] = report["group_by"]
    measures = [k for k in report["total"] if k not in groups]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*groups, *measures])
    for row in report["rows"]:
        writer.writerow([*(row[g] for g in groups), *(row[m] for m in measures)])
    label = ["total"] + [""] * (len(groups) - 1) if groups else []
    writer.writerow([*label, *(report["total"][m] for m in measures)])
    return out.getvalue()
