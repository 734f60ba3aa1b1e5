"""The ledger: durable writes, replay after a crash, prices by version, reports that add up."""

from __future__ import annotations

import calendar
import os
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from gateway.accounts.ledger import (
    Ledger,
    LedgerRow,
    Price,
    PriceBook,
    ReportQuery,
    WriteAheadLog,
    cost_report,
    insert_rows,
    read_segment,
    report_csv,
)
from gateway.accounts.ledger._row import EntryIds
from gateway.accounts.storage import ledger, open_database
from gateway.errors import InvalidRequest


def row(
    tenant_id: int = 1, *, tier: str = "edge", day: str = "2026-01-02", cost: int = 10, **kw: object
) -> LedgerRow:
    ts = calendar.timegm(time.strptime(day, "%Y-%m-%d")) + 3600
    fields: dict[str, object] = {
        "entry_id": uuid.uuid4().hex,
        "request_id": uuid.uuid4().hex,
        "tenant_id": tenant_id,
        "key_id": "k",
        "ts": ts,
        "day": day,
        "model_asked": "tiergate-auto",
        "tier": tier,
        "model_used": f"{tier}-model",
        "route_reason": "test",
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "images": 0,
        "audio": 0,
        "video": 0,
        "ttft_ms": None,
        "total_ms": 1.5,
        "cache_hit": False,
        "degraded": False,
        "status": 200,
        "error": None,
        "price_id": None,
        "cost_nusd": cost,
        "counterfactual_nusd": cost * 3,
    }
    fields.update(kw)
    return LedgerRow(**fields)  # type: ignore[arg-type]


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")


def _count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(ledger)).scalar_one())


@pytest.mark.parametrize(("sync", "writer_process"), [("disk", True), ("disk", False), ("os", True)])
async def test_recorded_rows_are_on_disk_at_once_and_in_the_database_after_a_flush(
    engine: Engine, tmp_path: Path, sync: str, writer_process: bool
) -> None:
    book = Ledger(engine, tmp_path / "wal", flush_interval_s=3600, writer_process=writer_process, sync=sync)
    await book.start()
    rows = [row() for _ in range(20)]
    for r in rows[:10]:
        await book.record(r)
    segments = WriteAheadLog(tmp_path / "wal").segments()
    assert [r.entry_id for s in segments for r in read_segment(s)] == [r.entry_id for r in rows[:10]]
    for r in rows[10:]:
        book.submit(r)
    await book.aclose()
    assert _count(engine) == 20
    assert WriteAheadLog(tmp_path / "wal").segments() == []


async def test_with_sync_os_rows_are_written_by_the_loop_and_a_failed_write_fails_the_record(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    book = Ledger(engine, tmp_path / "wal", flush_interval_s=3600, sync="os")
    await book.start()
    assert book._process is None  # no writer process: nothing to wait for
    first = row()
    await book.record(first)
    [segment] = WriteAheadLog(tmp_path / "wal").segments()
    assert [r.entry_id for r in read_segment(segment)] == [first.entry_id]

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("gateway.accounts.storage._segments.os.write", full)
    with pytest.raises(OSError, match="No space left"):
        await book.record(row())
    monkeypatch.undo()
    await book.flush()
    assert _count(engine) == 1
    await book.aclose()


async def test_rows_left_by_a_killed_process_are_replayed_once(engine: Engine, tmp_path: Path) -> None:
    wal = WriteAheadLog(tmp_path / "wal")
    rows = [row() for _ in range(5)]
    from gateway.accounts.ledger._row import encode_row

    wal.append(b"".join(encode_row(r) + b"\n" for r in rows) + b'["torn')  # killed mid-write
    wal.close()
    insert_rows(engine, rows[:2])  # some had reached the database already
    book = Ledger(engine, tmp_path / "wal")
    assert await book.start() == 5
    await book.aclose()
    assert _count(engine) == 5


def test_prices_are_versioned_and_rows_keep_their_version(engine: Engine) -> None:
    first = PriceBook.sync(engine, [Price(tier="cloud", prompt_per_1k=1.0, completion_per_1k=2.0)], "cloud")
    same = PriceBook.sync(engine, [Price(tier="cloud", prompt_per_1k=1.0, completion_per_1k=2.0)], "cloud")
    assert first.charge("cloud", "m", 1000, 500) == same.charge("cloud", "m", 1000, 500)
    old = first.charge("cloud", "m", 1000, 500)
    assert old.cost_nusd == 2_000_000_000
    new = PriceBook.sync(engine, [Price(tier="cloud", prompt_per_1k=2.0, completion_per_1k=2.0)], "cloud")
    charged = new.charge("cloud", "m", 1000, 500)
    assert charged.price_id != old.price_id and charged.cost_nusd == 3_000_000_000
    assert new.charge("edge", "m", 1000, 500).cost_nusd == 0  # no price: free, and says so (no id)
    assert new.counterfactual(1000, 0) == 2_000_000_000


def test_report_totals_equal_the_sum_of_rows_and_stay_within_the_tenant(engine: Engine) -> None:
    from gateway.accounts.storage import tenants

    with engine.begin() as conn:
        conn.execute(tenants.insert(), [{"name": "a", "created_at": 0}, {"name": "b", "created_at": 0}])
    mine = [
        row(1, tier="edge", day="2026-01-01", cost=11),
        row(1, tier="cloud", day="2026-01-01", cost=1001),
        row(1, tier="edge", day="2026-01-02", cost=13),
        row(1, tier="edge", day="2026-01-03", cost=17, status=502, prompt_tokens=0, completion_tokens=0),
    ]
    theirs = [row(2, tier="cloud", day="2026-01-01", cost=99_999)]
    insert_rows(engine, mine + theirs)
    report = cost_report(engine, ReportQuery.parse("a", None, None, "day,tier"), 1)
    assert report["total"]["cost_nusd"] == sum(r.cost_nusd for r in mine)
    assert sum(r["cost_nusd"] for r in report["rows"]) == report["total"]["cost_nusd"]
    assert report["total"]["requests"] == 4 and report["total"]["answered"] == 3
    assert report["total"]["savings_nusd"] == sum(r.counterfactual_nusd - r.cost_nusd for r in mine)
    assert [(r["day"], r["tier"]) for r in report["rows"]] == [
        ("2026-01-01", "cloud"),
        ("2026-01-01", "edge"),
        ("2026-01-02", "edge"),
        ("2026-01-03", "edge"),
    ]
    window = cost_report(engine, ReportQuery.parse("a", "2026-01-02", "2026-01-02", ""), 1)
    assert window["total"]["cost_nusd"] == 13  # a bare until date includes that day
    everyone = cost_report(engine, ReportQuery.parse(None, None, None, "tenant"), None)
    assert {r["tenant"]: r["cost_nusd"] for r in everyone["rows"]} == {"a": 1042, "b": 99_999}
    csv = report_csv(report).splitlines()
    assert csv[0].startswith("day,tier,requests,") and csv[-1].startswith("total,,4,3,")


@pytest.mark.parametrize(
    ("since", "until", "group_by", "param"),
    [
        ("yesterday", None, None, "since"),
        (None, "2026-13-01", None, "until"),
        ("2026-01-05", "2026-01-01", None, "until"),
        (None, None, "day,colour", "group_by"),
        (None, None, "day,day", "group_by"),
    ],
)
def test_malformed_report_parameters_are_400(
    since: str | None, until: str | None, group_by: str | None, param: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ReportQuery.parse("a", since, until, group_by)
    assert caught.value.param == param


async def test_ledger_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    engine = open_database(postgres_url)
    assert engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        conn.execute(ledger.delete())
    book = Ledger(engine, tmp_path / "wal")
    await book.start()
    rows = [row(cost=i) for i in range(50)]
    for r in rows:
        await book.record(r)
    await book.aclose()
    insert_rows(engine, rows[:10])  # replaying is harmless on PostgreSQL too
    assert _count(engine) == 50
    report = cost_report(engine, ReportQuery.parse(None, None, None, "day"), 1)
    assert report["total"]["cost_nusd"] == sum(range(50))
    book2 = PriceBook.sync(engine, [Price(tier="edge", prompt_per_1k=0.5)], "cloud")
    assert book2.charge("edge", "x", 2000, 0).cost_nusd == 1_000_000_000
    engine.dispose()


def test_entry_ids_are_unique_hex_and_a_forked_child_draws_its_own() -> None:
    ids = EntryIds()
    made = [ids() for _ in range(10_000)]
    assert len(set(made)) == len(made)
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in made)
    assert EntryIds()() != ids()  # another instance (another process) starts from other random bits
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id must not repeat the parent's next one
        os.write(write, ids().encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 64).decode()
    os.close(read)
    os.close(write)
    assert child[:16] != made[0][:16]
    assert child != ids()
