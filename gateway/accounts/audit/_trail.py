"""The audit trail in the database: append one row per change, read it back, verify its chain.

Every call is blocking (run it in a thread from the event loop). :func:`append` writes a row inside
the caller's transaction, so a change and its row commit together or not at all; the stores call it
in the same transaction as their change. Appends are serialized on the one ``audit_head`` row:
PostgreSQL's ``SELECT ... FOR UPDATE`` holds gateways sharing a database in line until the holder
commits; on SQLite the head's ``INSERT ... ON CONFLICT`` takes the database's write lock first.
Either way two appends never read the same head, so the chain does not fork.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, Row, select, text

from gateway.accounts.audit._event import (
    GENESIS,
    AuditRow,
    Event,
    chain_hash,
    content_of,
    json_or_none,
    now_iso,
)
from gateway.accounts.storage import audit_head, audit_log
from gateway.errors import InvalidRequest

_ENSURE_HEAD = text(
    "INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, :genesis) ON CONFLICT (id) DO NOTHING"
)
COLUMNS = tuple(str(c.name) for c in audit_log.columns)
MAX_PAGE = 500


def append(conn: Connection, event: Event) -> AuditRow:
    """Record ``event`` as the chain's next row, in ``conn``'s transaction."""
    conn.execute(_ENSURE_HEAD, {"genesis": GENESIS})  # SQLite: the write lock, from here to commit
    head = conn.execute(select(audit_head).where(audit_head.c.id == 1).with_for_update()).one()
    columns: dict[str, Any] = {
        "seq": head.seq + 1,
        "at": now_iso(),
        "actor": event.actor.id,
        "actor_kind": event.actor.kind,
        "address": event.actor.address,
        "action": event.action,
        "object_type": event.object_type,
        "object_id": event.object_id,
        "tenant": event.tenant,
        "before": json_or_none(event.before),
        "after": json_or_none(event.after),
        "prev_hash": head.hash,
    }
    columns["hash"] = chain_hash(head.hash, content_of(columns))
    conn.execute(audit_log.insert().values(**columns))
    conn.execute(
        audit_head.update().where(audit_head.c.id == 1).values(seq=columns["seq"], hash=columns["hash"])
    )
    return _row(columns)


def _row(columns: Any) -> AuditRow:
    get = columns.__getitem__ if isinstance(columns, dict) else columns._mapping.__getitem__
    values = {name: get(name) for name in COLUMNS}
    for side in ("before", "after"):
        values[side] = None if values[side] is None else json.loads(values[side])
    return msgspec.convert(values, AuditRow)


def parse_time(value: str, param: str) -> str:
    """An ISO-8601 date or date-time (naive: UTC) as the trail's ``at`` text, for comparing."""
    try:
        when = datetime.fromisoformat(value.strip())
    except ValueError as exc:
        raise InvalidRequest(f"{param} must be an ISO-8601 date or date-time", param=param) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return now_iso(when)


class AuditQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A filter over the trail; ``tenants``: the reader's scope (None: every row; a tenant admin:
    only rows of its tenants)."""

    actor: str | None = None
    object_type: str | None = None
    object_id: str | None = None
    since: str | None = None  # ISO-8601 (checked by parse_time)
    until: str | None = None
    tenants: frozenset[str] | None = None
    limit: int = 100
    after: int | None = None  # a seq: the page continues with older rows than it


class Broken(msgspec.Struct, frozen=True):
    """The first row where the chain does not hold."""

    seq: int
    reason: str


class AuditTrail:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def record(self, event: Event) -> AuditRow:
        """A change made outside the stores' own transactions (tiers, settings, sign-ins)."""
        with self.engine.begin() as conn:
            return append(conn, event)

    async def record_async(self, event: Event) -> AuditRow:
        return await asyncio.to_thread(self.record, event)

    def page(self, query: AuditQuery) -> dict[str, Any]:
        """Rows matching ``query``, newest first, OpenAI's list shape: data, has_more, first/last id."""
        if not 1 <= query.limit <= MAX_PAGE:
            raise InvalidRequest(f"limit must be between 1 and {MAX_PAGE}", param="limit")
        stmt = select(audit_log).order_by(audit_log.c.seq.desc()).limit(query.limit + 1)
        for column, value in (
            (audit_log.c.actor, query.actor),
            (audit_log.c.object_type, query.object_type),
            (audit_log.c.object_id, query.object_id),
        ):
            if value:
                stmt = stmt.where(column == value)
        if query.since:
            stmt = stmt.where(audit_log.c.at >= parse_time(query.since, "since"))
        if query.until:
            stmt = stmt.where(audit_log.c.at <= parse_time(query.until, "until"))
        if query.tenants is not None:
            stmt = stmt.where(audit_log.c.tenant.in_(sorted(query.tenants)))
        if query.after is not None:
            stmt = stmt.where(audit_log.c.seq < query.after)
        with self.engine.connect() as conn:
            rows = [_row(r) for r in conn.execute(stmt)]
        data = rows[: query.limit]
        return {
            "object": "list",
            "data": data,
            "has_more": len(rows) > query.limit,
            "first_id": data[0].seq if data else None,
            "last_id": data[-1].seq if data else None,
        }

    def rows(self, since: str | None = None, batch: int = 1000) -> Iterator[AuditRow]:
        """Every row from the oldest (``since``: at or after it), read in batches."""
        last = 0
        start = parse_time(since, "since") if since else None
        while True:
            stmt = select(audit_log).where(audit_log.c.seq > last).order_by(audit_log.c.seq).limit(batch)
            if start is not None:
                stmt = stmt.where(audit_log.c.at >= start)
            with self.engine.connect() as conn:
                found = conn.execute(stmt).all()
            for row in found:
                yield _row(row)
            if len(found) < batch:
                return
            last = found[-1].seq

    def verify(self) -> tuple[int, Broken | None]:
        """(rows checked, the first row that breaks the chain or None). A row breaks it when its
        content no longer gives its hash (edited), its prev_hash is not the row before's hash, or
        its seq skips (a row deleted before it); a head ahead of the last row: rows deleted at the end."""
        expected_seq, prev, checked = 1, GENESIS, 0
        for row in self._raw_rows():
            columns = dict(row._mapping)
            if columns["seq"] != expected_seq:
                return checked, Broken(expected_seq, f"row {expected_seq} is missing (deleted)")
            if columns["prev_hash"] != prev:
                return checked, Broken(row.seq, "its prev_hash is not the previous row's hash")
            if chain_hash(prev, content_of(columns)) != columns["hash"]:
                return checked, Broken(row.seq, "its content does not match its hash (edited)")
            prev, expected_seq, checked = columns["hash"], expected_seq + 1, checked + 1
        with self.engine.connect() as conn:
            head = conn.execute(select(audit_head).where(audit_head.c.id == 1)).first()
        if head is not None and (head.seq, head.hash) != (expected_seq - 1, prev):
            return checked, Broken(expected_seq, f"rows {expected_seq}..{head.seq} are missing (deleted)")
        return checked, None

    def _raw_rows(self, batch: int = 1000) -> Iterator[Row[Any]]:
        last = 0
        while True:
            stmt = select(audit_log).where(audit_log.c.seq > last).order_by(audit_log.c.seq).limit(batch)
            with self.engine.connect() as conn:
                found = conn.execute(stmt).all()
            yield from found
            if len(found) < batch:
                return
            last = found[-1].seq


def export_lines(rows: Iterator[AuditRow], fmt: str) -> Iterator[str]:
    """The rows as JSON lines, or CSV with a header (before/after as their JSON text)."""
    if fmt == "jsonl":
        for row in rows:
            yield msgspec.json.encode(row).decode() + "\n"
        return
    if fmt != "csv":
        raise InvalidRequest("format must be jsonl or csv", param="format")
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(COLUMNS)
    for row in rows:
        values = msgspec.structs.asdict(row)
        for side in ("before", "after"):
            values[side] = "" if values[side] is None else json.dumps(values[side], sort_keys=True)
        writer.writerow(["" if values[c] is None else values[c] for c in COLUMNS])
        yield out.getvalue()
        out.seek(0)
        out.truncate()
    yield out.getvalue()
