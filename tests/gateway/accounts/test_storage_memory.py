"""The database's connections and SQLite page caches are what ``[storage]`` says (issue 43)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from gateway.accounts.storage import open_database


def test_each_sqlite_connection_takes_the_configured_page_cache_and_the_pool_its_size(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}", sqlite_cache_mib=3, pool_size=2)
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA cache_size")).scalar() == -3 * 1024
    assert engine.pool.size() == 2  # type: ignore[attr-defined]
    assert engine.pool._max_overflow == 4  # type: ignore[attr-defined]
    engine.dispose()
