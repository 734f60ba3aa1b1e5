"""A ledger that cannot be wedged: strings are made to fit as rows are recorded, and a row the
database still refuses (written by an older version, or by hand) is set aside with its reason and
counted while the rest of its segment, and every later segment, loads; a start never fails on it.
On a real PostgreSQL (NUL characters, VARCHAR widths and integer ranges are enforced there)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from sqlalchemy import Engine, select

from gateway.accounts.ledger import Ledger, LedgerRow, WriteAheadLog
from gateway.accounts.ledger._quarantine import QUARANTINE_FILE, fit_row
from gateway.accounts.ledger._row import encode_row
from gateway.accounts.storage import ledger, open_database
from tests.gateway.accounts.test_ledger import row


@pytest.fixture
def pg(postgres_url: str) -> Iterator[Engine]:
    engine = open_database(postgres_url)
    with engine.begin() as conn:
        conn.execute(ledger.delete())
    yield engine
    engine.dispose()


def stored(engine: Engine) -> dict[str, object]:
    with engine.connect() as conn:
        return {r.entry_id: r for r in conn.execute(select(ledger))}


def poisoned() -> tuple[list[LedgerRow], list[LedgerRow]]:
    """(good rows, rows PostgreSQL refuses as they are)."""
    good = [row(cost=i) for i in range(6)]
    bad = [
        row(model_asked="a\u0000"),  # NUL: refused by PostgreSQL's text types
        row(model_asked="m" * 300),  # over VARCHAR(256)
        row(route_reason="why\u0000not"),  # NUL in a TEXT column
        row(prompt_tokens=2**40),  # over INTEGER
    ]
    return good, bad


def write_segment(wal_dir: Path, rows: list[LedgerRow], extra: bytes = b"") -> None:
    wal = WriteAheadLog(wal_dir)
    wal.append(b"".join(encode_row(r) + b"\n" for r in rows) + extra)
    wal.close()


async def test_a_poisoned_segment_loads_its_good_rows_and_sets_the_bad_ones_aside(
    pg: Engine, tmp_path: Path
) -> None:
    good, bad = poisoned()
    wal_dir = tmp_path / "wal"
    mixed = [good[0], bad[0], good[1], bad[1], good[2], bad[2], bad[3]]
    write_segment(wal_dir, mixed, extra=b"not json at all\n")  # as a killed older version left it
    write_segment(wal_dir, good[3:])  # a later segment
    counted: list[int] = []
    book = Ledger(pg, wal_dir, flush_interval_s=3600, on_quarantine=counted.append)
    assert await book.start() == len(mixed) + 3  # the start does not fail
    await book.aclose()
    assert set(stored(pg)) == {r.entry_id for r in good}
    assert WriteAheadLog(wal_dir).segments() == []  # no segment left behind to wedge the loader
    assert book.quarantined == 5 and sum(counted) == 5
    entries = [json.loads(line) for line in (wal_dir / QUARANTINE_FILE).read_text().splitlines()]
    assert len(entries) == 5 and all(e["segment"] == "segment-1.jsonl" for e in entries)
    reasons = " | ".join(e["reason"] for e in entries)
    assert "NUL" in reasons and "too long" in reasons and "out of range" in reasons
    assert "not a ledger row" in reasons
    kept = {json.loads(e["row"])[0] for e in entries if e["row"].startswith("[")}
    assert kept == {r.entry_id for r in bad}  # the rows as written, to be mended by hand


async def test_a_restart_after_quarantine_starts_clean(pg: Engine, tmp_path: Path) -> None:
    good, bad = poisoned()
    write_segment(tmp_path / "wal", [*good, *bad])
    first = Ledger(pg, tmp_path / "wal", flush_interval_s=3600)
    await first.start()
    await first.aclose()
    second = Ledger(pg, tmp_path / "wal", flush_interval_s=3600)
    assert await second.start() == 0
    await second.record(row())  # and it keeps recording
    await second.aclose()
    assert len(stored(pg)) == len(good) + 1 and second.quarantined == 0


async def test_strings_are_made_to_fit_as_rows_are_recorded(pg: Engine, tmp_path: Path) -> None:
    book = Ledger(pg, tmp_path / "wal", flush_interval_s=3600)
    await book.start()
    nul, long, reason = row(model_asked="a\u0000"), row(model_asked="é" * 100_000), row(error="x\u0000y")
    for r in (nul, long, reason):
        await book.record(r)
    await book.aclose()
    rows = stored(pg)
    assert book.quarantined == 0 and len(rows) == 3
    assert rows[nul.entry_id].model_asked == "a\ufffd"  # type: ignore[attr-defined]
    fitted = rows[long.entry_id].model_asked  # type: ignore[attr-defined]
    assert len(fitted) == 256 and fitted.endswith("\u2026")
    assert rows[reason.entry_id].error == "x\ufffdy"  # type: ignore[attr-defined]


def test_fit_row_leaves_a_fitting_row_alone() -> None:
    fine = row()
    assert fit_row(fine) is fine
    assert msgspec.structs.asdict(fit_row(row(request_id="r" * 500)))["request_id"] == "r" * 127 + "\u2026"


async def test_on_sqlite_too_a_refused_row_does_not_stop_the_segment(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    good = [row() for _ in range(3)]
    write_segment(tmp_path / "wal", [good[0], row(tenant_id=2**70), *good[1:]])  # over SQLite's 64 bits
    book = Ledger(engine, tmp_path / "wal", flush_interval_s=3600)
    await book.start()
    await book.aclose()
    assert set(stored(engine)) == {r.entry_id for r in good} and book.quarantined == 1
