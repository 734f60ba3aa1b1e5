"""Batches and their lines in the database: created from a tenant's file, claimed line by line by
whichever gateway has room, each line done once, then finalized into an output and an error file.

A line is keyed by (batch id, line number).  A gateway claims pending lines (``SELECT … FOR UPDATE
SKIP LOCKED`` on PostgreSQL, so several gateways share a batch without taking the same line; SQLite
serialises writers and one gateway owns a data folder), marks them running with its id and the
time, and marks each done with its answer.  A claim older than ``lease_s`` is taken again (its
gateway died); on SQLite, a gateway starting takes back every running line at once (the one that
held them is gone).  A finished line is never claimed again; its ledger row's id comes from the same
key, so a line run twice (its gateway killed between the answer and the mark) is billed once.
Blocking: callers on the event loop run these in a thread.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import Engine, and_, case, func, insert, or_, select, update

from gateway.accounts.batches._files import FileRecord, FileStore
from gateway.accounts.batches._lines import (
    ENDPOINTS,
    LineError,
    chunked,
    line_rows,
    output_line,
    refused_line,
)
from gateway.accounts.storage import batch_lines, batches, ledger, ledger_tags
from gateway.errors import Conflict, InvalidRequest, NotFound

ACTIVE = ("in_progress", "cancelling", "finalizing")
WINDOW_S = 24 * 3600.0  # completion_window "24h", the only one OpenAI offers
_INSERT_ROWS = 500  # lines inserted per statement


class BatchRecord(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    tenant: str
    key_id: str
    endpoint: str
    input_file_id: str
    status: str
    metadata: dict[str, str] | None
    errors: list[dict[str, Any]] | None
    output_file_id: str | None
    error_file_id: str | None
    created_at: float
    expires_at: float
    in_progress_at: float | None
    finalizing_at: float | None
    completed_at: float | None
    failed_at: float | None
    expired_at: float | None
    cancelling_at: float | None
    cancelled_at: float | None
    total: int
    completed: int = 0
    failed: int = 0


@dataclass(frozen=True, slots=True)
class LineJob:
    """A claimed line, with what running it needs."""

    batch_id: str
    line: int
    custom_id: str
    body: bytes
    tenant: str
    key_id: str
    endpoint: str

    @property
    def request_id(self) -> str:
        return f"{self.batch_id}-{self.line}"


def _record(row: Any, counts: tuple[int, int] = (0, 0)) -> BatchRecord:
    values = row._asdict()
    values["metadata"] = msgspec.json.decode(values["metadata"]) if values["metadata"] else None
    values["errors"] = msgspec.json.decode(values["errors"]) if values["errors"] else None
    return BatchRecord(**values, completed=counts[0], failed=counts[1])


class BatchStore:
    def __init__(
        self, engine: Engine, files: FileStore, *, owner: str, lease_s: float, max_line: int
    ) -> None:
        self._engine = engine
        self.files = files
        self.owner = owner  # this gateway's id on its claims
        self._lease_s = lease_s
        self._max_line = max_line
        self._shared = engine.dialect.name != "sqlite"

    # -- the API's side ------------------------------------------------------------------------

    def create(
        self, tenant: str, key_id: str, file_id: str, endpoint: str, metadata: dict[str, str] | None
    ) -> BatchRecord:
        """Validate the input file and record the batch with its lines: ``in_progress`` with each
        bad line done already (its error kept for the error file), or ``failed`` with ``errors``
        when the file cannot be a batch at all (empty, or not a batch file)."""
        if endpoint not in ENDPOINTS:
            raise InvalidRequest(f"endpoint must be one of {', '.join(ENDPOINTS)}", param="endpoint")
        source = self.files.get(tenant, file_id)
        now = time.time()
        batch_id = f"batch_{secrets.token_hex(12)}"
        errors: list[LineError] = []
        if source.purpose != "batch":
            errors.append(LineError(code="invalid_file", message=f"{file_id} is not a batch file", line=0))
        rows, total = ([], 0) if errors else self._lines(batch_id, source, endpoint)
        if not errors and total == 0:
            errors.append(LineError(code="empty_file", message="the input file has no requests", line=0))
        values: dict[str, Any] = {
            "id": batch_id,
            "tenant": tenant,
            "key_id": key_id,
            "endpoint": endpoint,
            "input_file_id": file_id,
            "metadata": msgspec.json.encode(metadata).decode() if metadata else None,
            "created_at": now,
            "expires_at": now + WINDOW_S,
            "total": total,
        }
        if errors:
            values |= {"status": "failed", "failed_at": now, "errors": msgspec.json.encode(errors).decode()}
        else:
            values |= {"status": "in_progress", "in_progress_at": now}
        with self._engine.begin() as conn:
            conn.execute(insert(batches).values(**values))
            for rows_ in chunked(rows, _INSERT_ROWS):
                conn.execute(insert(batch_lines), rows_)
        return self.get(tenant, batch_id)

    def _lines(
        self, batch_id: str, source: FileRecord, endpoint: str
    ) -> tuple[Iterator[dict[str, Any]], int]:
        """The lines' rows (read as they are inserted) and how many there are (blank lines skipped)."""
        total = sum(1 for line in self.files.lines(source, self._max_line) if line is None or line.strip())
        lines = self.files.lines(source, self._max_line)
        return line_rows(batch_id, lines, endpoint, self._max_line), total

    def get(self, tenant: str | None, batch_id: str) -> BatchRecord:
        """A batch (``tenant`` None: any tenant's, for operators); another tenant's is a 404."""
        query = select(batches).where(batches.c.id == batch_id)
        if tenant is not None:
            query = query.where(batches.c.tenant == tenant)
        with self._engine.connect() as conn:
            row = conn.execute(query).first()
            if row is None:
                raise NotFound(f"No batch found with id '{batch_id[:64]}'.", param="batch_id")
            return _record(row, self._counts(conn, batch_id))

    def _counts(self, conn: Any, batch_id: str) -> tuple[int, int]:
        """(completed, failed): lines done with a 2xx answer, and lines done otherwise."""
        c = batch_lines.c
        ok = func.sum(case((and_(c.status_code >= 200, c.status_code < 300), 1), else_=0))
        row = conn.execute(
            select(func.count(), ok).where(and_(c.batch_id == batch_id, c.state == "done"))
        ).first()
        done, good = (row[0] or 0, row[1] or 0) if row is not None else (0, 0)
        return int(good), int(done - good)

    def listed(self, tenant: str | None, limit: int, after: str | None) -> tuple[list[BatchRecord], bool]:
        """A page of batches, newest first (``tenant`` None: every tenant's)."""
        c = batches.c
        query = select(batches)
        if tenant is not None:
            query = query.where(c.tenant == tenant)
        if after:
            mark = self.get(tenant, after)
            query = query.where(
                or_(c.created_at < mark.created_at, and_(c.created_at == mark.created_at, c.id < mark.id))
            )
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(c.created_at.desc(), c.id.desc()).limit(limit + 1)).all()
            found = [_record(r, self._counts(conn, r.id)) for r in rows[:limit]]
        return found, len(rows) > limit

    def cancel(self, tenant: str, batch_id: str) -> BatchRecord:
        """No line is taken from it any more; the lines running finish, then it is ``cancelled``."""
        batch = self.get(tenant, batch_id)
        if batch.status in ("cancelling", "cancelled"):
            return batch
        if batch.status != "in_progress":
            raise Conflict(f"Cannot cancel a batch with status '{batch.status}'.")
        with self._engine.begin() as conn:
            conn.execute(
                update(batches)
                .where(and_(batches.c.id == batch_id, batches.c.status == "in_progress"))
                .values(status="cancelling", cancelling_at=time.time())
            )
        return self.get(tenant, batch_id)

    def cost_nusd(self, batch_id: str) -> int:
        """What its lines have cost so far: its ledger rows (tag ``batch``) loaded into the database."""
        t = ledger_tags.c
        query = (
            select(func.coalesce(func.sum(ledger.c.cost_nusd), 0))
            .select_from(ledger_tags.join(ledger, ledger.c.entry_id == t.entry_id))
            .where(and_(t.key == "batch", t.value == batch_id))
        )
        with self._engine.connect() as conn:
            return int(conn.execute(query).scalar() or 0)

    # -- the runner's side ---------------------------------------------------------------------

    def take_back(self) -> int:
        """On SQLite, at start: every running line is pending again (its gateway is gone)."""
        if self._shared:
            return 0
        with self._engine.begin() as conn:
            moved = conn.execute(
                update(batch_lines)
                .where(batch_lines.c.state == "running")
                .values(state="pending", owner=None)
            )
        return int(moved.rowcount or 0)

    def claim(self, n: int) -> list[LineJob]:
        """Up to ``n`` lines of in-progress batches, oldest batch first, now this gateway's."""
        if n <= 0:
            return []
        now = time.time()
        b, c = batches.c, batch_lines.c
        takeable = or_(c.state == "pending", and_(c.state == "running", c.claimed_at < now - self._lease_s))
        query = (
            select(c.batch_id, c.line, c.custom_id, c.body)
            .where(and_(c.batch_id.in_(select(b.id).where(b.status == "in_progress")), takeable))
            .order_by(c.batch_id, c.line)
            .limit(n)
            .with_for_update(skip_locked=True)
        )
        with self._engine.begin() as conn:
            found = conn.execute(query).all()
            # Each line taken only if it is still takeable (a compare-and-set): on SQLite two
            # connections may both read it before either writes.
            rows = [
                r
                for r in found
                if conn.execute(
                    update(batch_lines)
                    .where(and_(c.batch_id == r.batch_id, c.line == r.line, takeable))
                    .values(state="running", owner=self.owner, claimed_at=now)
                ).rowcount
            ]
            if not rows:
                return []
            ids = {r.batch_id for r in rows}
            owners = {
                x.id: x
                for x in conn.execute(select(b.id, b.tenant, b.key_id, b.endpoint).where(b.id.in_(ids)))
            }
        return [
            LineJob(
                r.batch_id,
                r.line,
                r.custom_id,
                r.body.encode(),
                owners[r.batch_id].tenant,
                owners[r.batch_id].key_id,
                owners[r.batch_id].endpoint,
            )
            for r in rows
        ]

    def finish(self, job: LineJob, status: int, response: bytes, error: LineError | None) -> None:
        """The line is done with this answer (once: a line done already keeps its first)."""
        c = batch_lines.c
        values = {
            "state": "done",
            "status_code": status,
            "response": response.decode(),
            "error": msgspec.json.encode(error).decode() if error is not None else None,
            "done_at": time.time(),
        }
        with self._engine.begin() as conn:
            conn.execute(
                update(batch_lines)
                .where(and_(c.batch_id == job.batch_id, c.line == job.line, c.state != "done"))
                .values(**values)
            )

    def put_back(self, job: LineJob) -> None:
        """The line goes back to pending (refused for the tenant's limits or a full lane: later)."""
        c = batch_lines.c
        with self._engine.begin() as conn:
            conn.execute(
                update(batch_lines)
                .where(and_(c.batch_id == job.batch_id, c.line == job.line, c.state == "running"))
                .values(state="pending", owner=None)
            )

    def ready_to_end(self) -> list[str]:
        """Batches whose work is over: no line left to run (or cancelled with none running, or past
        their window), and finalizations begun by a gateway that has been gone a lease."""
        now = time.time()
        b, c = batches.c, batch_lines.c
        open_lines = select(c.batch_id).where(and_(c.batch_id == b.id, c.state.in_(("pending", "running"))))
        running = select(c.batch_id).where(and_(c.batch_id == b.id, c.state == "running"))
        query = select(b.id).where(
            or_(
                and_(b.status == "in_progress", or_(~open_lines.exists(), b.expires_at < now)),
                and_(b.status == "cancelling", ~running.exists()),
                and_(b.status == "finalizing", b.finalizing_at < now - self._lease_s),
            )
        )
        with self._engine.connect() as conn:
            return [r.id for r in conn.execute(query)]

    def finalize(self, batch_id: str) -> bool:
        """Write its output and error files and give it its final status; False when another gateway
        took it first."""
        now = time.time()
        b = batches.c
        with self._engine.begin() as conn:
            row = conn.execute(select(batches).where(b.id == batch_id)).first()
            if row is None or row.status in ("completed", "cancelled", "expired", "failed"):
                return False
            stale = row.status == "finalizing" and (row.finalizing_at or 0) < now - self._lease_s
            if row.status != "finalizing" or stale:
                before = row.status
                moved = conn.execute(
                    update(batches)
                    .where(and_(b.id == batch_id, b.status == before))
                    .values(status="finalizing", finalizing_at=now)
                )
                if not moved.rowcount:
                    return False
            else:
                return False
        cancelled = row.cancelling_at is not None
        expired = not cancelled and row.expires_at < now
        out = self.files.written(
            _file_id(batch_id, "out"), row.tenant, f"{batch_id}_output.jsonl", self._out(batch_id, ok=True)
        )
        err = self.files.written(
            _file_id(batch_id, "err"), row.tenant, f"{batch_id}_error.jsonl", self._out(batch_id, ok=False)
        )
        final = "cancelled" if cancelled else "expired" if expired else "completed"
        with self._engine.begin() as conn:
            conn.execute(
                update(batches)
                .where(b.id == batch_id)
                .values(
                    status=final,
                    output_file_id=out.id if out is not None else None,
                    error_file_id=err.id if err is not None else None,
                    **{f"{final}_at": time.time()},
                )
            )
        return True

    def _out(self, batch_id: str, *, ok: bool) -> Iterator[bytes]:
        """The output file's lines (2xx answers) or the error file's (the rest), in line order, read
        from the database in pages."""
        c = batch_lines.c
        last = 0
        while True:
            with self._engine.connect() as conn:
                rows = conn.execute(
                    select(c.line, c.custom_id, c.status_code, c.response, c.error)
                    .where(and_(c.batch_id == batch_id, c.state == "done", c.line > last))
                    .order_by(c.line)
                    .limit(_INSERT_ROWS)
                ).all()
            if not rows:
                return
            for r in rows:
                last = r.line
                good = r.status_code is not None and 200 <= r.status_code < 300
                if good != ok:
                    continue
                error = msgspec.json.decode(r.error, type=LineError) if r.error else None
                if r.status_code is None:
                    assert error is not None
                    yield refused_line(r.custom_id, error)
                else:
                    rid = f"{batch_id}-{r.line}"
                    yield output_line(r.custom_id, r.status_code, rid, r.response.encode(), error)

    def active(self) -> list[BatchRecord]:
        """Batches in progress, cancelling or finalizing (the admin page and /metrics)."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(batches).where(batches.c.status.in_(ACTIVE))).all()
            return [_record(r, self._counts(conn, r.id)) for r in rows]


def _file_id(batch_id: str, kind: str) -> str:
    return "file-" + hashlib.blake2b(f"{batch_id}:{kind}".encode(), digest_size=12).hexdigest()
