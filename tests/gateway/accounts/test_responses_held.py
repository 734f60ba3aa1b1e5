"""Stored responses written ahead (gateway/accounts/held_responses.py), on a real SQLite database and real
files: a held row is readable before it is in the table; what a killed run left in the write-ahead file
is in the table after the next start (a torn last line skipped); a deleted response does not come back
with it; a database that fails keeps the rows held and in the file until a later flush succeeds; past
the memory bound a put writes through."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from gateway.accounts.held_responses import HeldResponses, HeldRow
from gateway.accounts.storage import open_database, responses
from gateway.accounts.stored_responses import ResponseSettings, ResponseStore, Stored
from gateway.errors import NotFound


def table_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(responses)).scalar_one())


def ahead(tmp_path: Path, max_held_bytes: int = 64 << 20) -> tuple[ResponseStore, Engine]:
    engine = open_database(f"sqlite:///{tmp_path / 'tiergate.db'}")
    # Only flushed when a test says so.
    settings = ResponseSettings(flush_interval_s=3600, max_held_bytes=max_held_bytes)
    return ResponseStore(engine, settings, tmp_path / "responses-wal"), engine


def test_what_a_killed_run_held_is_in_the_table_after_the_next_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def killed_run() -> None:
        first, engine = ahead(tmp_path)  # not started: no sweep (which flushes first) runs meanwhile
        await first.put("acme", "resp_1", Stored(b'{"id":"resp_1"}', b"[1]"))
        await first.put("acme", "resp_2", Stored(b'{"id":"resp_2"}', b"[2]", "resp_1"))
        assert await first.get("acme", "resp_2") == b'{"id":"resp_2"}'  # readable at once
        assert await first.conversation("acme", "resp_2") == [b"[1]", b"[2]"]
        assert table_rows(engine) == 0  # only in memory and the file: no aclose, as if killed
        (segment,) = (tmp_path / "responses-wal").glob("segment-*.jsonl")
        with segment.open("ab") as f:
            f.write(b"not a row\n")  # a damaged line: skipped with a warning
            f.write(b'{"id":"resp_3","tenant":"ac')  # killed mid-append: never answered

    async def next_start() -> None:
        second, engine = ahead(tmp_path)
        await second.start()
        assert table_rows(engine) == 2
        assert await second.conversation("acme", "resp_2") == [b"[1]", b"[2]"]
        with pytest.raises(NotFound):
            await second.get("other", "resp_1")  # another tenant's, in the table too
        assert not list((tmp_path / "responses-wal").glob("segment-*.jsonl"))
        await second.aclose()

    asyncio.run(killed_run())
    asyncio.run(next_start())
    assert "line 3, is not a stored response" in caplog.text
    assert "line 4" not in caplog.text  # the torn last line is no warning


def test_a_deleted_response_stays_deleted_after_a_restart(tmp_path: Path) -> None:
    async def run() -> None:
        first, engine = ahead(tmp_path)
        await first.start()
        await first.put("acme", "resp_1", Stored(b"{}", b"[1]"))
        await first.put("acme", "resp_2", Stored(b"{}", b"[2]"))
        await first.delete("acme", "resp_1")  # held: written first, then deleted from the table
        with pytest.raises(NotFound):
            await first.get("acme", "resp_1")
        second, _ = ahead(tmp_path)  # the first was never closed: as if killed
        await second.start()
        with pytest.raises(NotFound):
            await second.get("acme", "resp_1")
        assert await second.get("acme", "resp_2") == b"{}"
        assert table_rows(engine) == 1

    asyncio.run(run())


def segments(folder: Path) -> list[Path]:
    return list(folder.glob("segment-*.jsonl"))


def row(n: int) -> HeldRow:
    return HeldRow(
        id=f"resp_{n}",
        tenant="acme",
        parent=None,
        created_at=0,
        expires_at=1e12,
        size=3,
        body=b"{}",
        added=b"[]",
    )


def test_a_failing_database_keeps_the_rows_held_and_in_the_file(tmp_path: Path) -> None:
    written: list[str] = []
    fail = [True]

    def insert(rows: list[HeldRow]) -> None:
        if fail[0]:
            raise OSError("database is locked")
        written.extend(r.id for r in rows)

    async def run() -> None:
        held = HeldResponses(tmp_path, insert, interval_s=3600)
        held.add(row(1))
        with pytest.raises(OSError):
            await held.flush()
        held.add(row(2))
        assert held.get("acme", "resp_1", now=0) is not None  # still readable
        assert len(segments(tmp_path)) == 2  # the failed one kept, and the new
        fail[0] = False
        await held.flush()
        assert written == ["resp_1", "resp_2"]
        assert held.get("acme", "resp_1", now=0) is None and not held.holds("resp_2")
        assert not segments(tmp_path)
        await held.aclose()

    asyncio.run(run())


def test_past_the_memory_bound_a_put_writes_through(tmp_path: Path) -> None:
    async def run() -> None:
        store, engine = ahead(
            tmp_path, max_held_bytes=1000
        )  # not started: no sweep (which flushes first) runs meanwhile
        await store.put("acme", "resp_1", Stored(b"x" * 600, b"[]"))
        await store.put("acme", "resp_2", Stored(b"x" * 600, b"[]"))  # 1204 held: at the bound
        assert table_rows(engine) == 0
        await store.put("acme", "resp_3", Stored(b"x" * 600, b"[]"))
        assert table_rows(engine) == 1  # written through, before put returned
        assert await store.get("acme", "resp_3") == b"x" * 600
        await store.aclose()
        assert table_rows(engine) == 3  # close writes what is held

    asyncio.run(run())
