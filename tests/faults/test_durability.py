"""Durability: with ``ledger.sync = "disk"`` SQLite commits with ``synchronous=FULL`` and a segment is
deleted only after the commit of its rows returned; one gateway per data folder (a second one on it
refuses to start, naming the owner's pid; a killed owner leaves no stale lock)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gateway.accounts.ledger import Ledger, WriteAheadLog
from gateway.accounts.ledger import _writer as writer
from gateway.accounts.storage import open_database
from tests.conftest import TIERGATE, free_port, start_gateway
from tests.gateway.accounts.test_ledger import row

NO_TIERS = "[edge]\nenabled = false\n[cloud]\nenabled = false\n"


def synchronous(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar_one())


def test_sqlite_commits_are_full_sync_only_when_the_ledger_syncs_to_disk(tmp_path: Path) -> None:
    assert synchronous(open_database(f"sqlite:///{tmp_path / 'a.db'}")) == 1  # NORMAL
    assert synchronous(open_database(f"sqlite:///{tmp_path / 'b.db'}", durable=True)) == 2  # FULL


async def test_a_segment_is_deleted_only_after_its_rows_are_committed_to_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}", durable=True)
    events: list[tuple[str, object]] = []
    real_insert, real_unlink = writer.insert_rows, Path.unlink

    def insert(engine_: Engine, rows: list[object]) -> None:
        real_insert(engine_, rows)  # type: ignore[arg-type]
        events.append(("committed", synchronous(engine_)))

    def unlink(path: Path, missing_ok: bool = False) -> None:
        if path.name.startswith("segment-"):
            events.append(("deleted", path.name))
        real_unlink(path, missing_ok=missing_ok)

    monkeypatch.setattr(writer, "insert_rows", insert)
    monkeypatch.setattr(Path, "unlink", unlink)
    book = Ledger(engine, tmp_path / "wal", flush_interval_s=3600, sync="disk", writer_process=False)
    await book.start()
    for _ in range(3):
        await book.record(row())
    await book.flush()
    await book.aclose()
    assert events[0] == ("committed", 2) and events[1][0] == "deleted"
    assert WriteAheadLog(tmp_path / "wal").segments() == []


def test_a_second_gateway_on_the_same_data_folder_refuses_to_start(tmp_path: Path) -> None:
    first = start_gateway(tmp_path, NO_TIERS, edge=False)
    try:
        config = tmp_path / "tiergate.toml"
        second = subprocess.run(
            [TIERGATE, "serve", "--config", str(config), "--port", str(free_port())],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2, second.stderr
        assert f"pid {first.process.pid}" in second.stderr and str(first.data_dir) in second.stderr
        assert first.process.poll() is None  # the first one serves on
    finally:
        first.process.send_signal(signal.SIGKILL)
        first.process.wait(30)
    again = start_gateway(tmp_path, NO_TIERS, edge=False)  # a killed owner leaves no stale lock
    again.stop()
