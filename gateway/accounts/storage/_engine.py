"""Open the database: SQLite gets WAL and a busy timeout; the schema is created or checked.

SQLite runs ``synchronous=NORMAL`` (a commit survives the process being killed; a power cut may
undo the last ones: the ledger's own write-ahead file has the rows until they are loaded) or, with
``durable`` (``ledger.sync = "disk"``), ``synchronous=FULL`` (each commit is on disk when it returns,
so the ledger deletes a segment only once its rows are). PostgreSQL commits durably unless its
server says otherwise (``synchronous_commit``): with ``durable``, a server that does not is logged.
"""

from __future__ import annotations

import functools
import logging
import re
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, inspect, select

from gateway.accounts.storage._schema import metadata, schema_version

log = logging.getLogger(__name__)

# Bump with a migration step in _MIGRATIONS when a table changes.
SCHEMA_VERSION = 8
# version -> statements that bring a database from version-1 to version.
_MIGRATIONS: dict[int, list[str]] = {
    2: [
        "ALTER TABLE tenants ADD COLUMN video_seconds_per_min INTEGER",
        "ALTER TABLE tenants ADD COLUMN audio_seconds_per_min INTEGER",
    ],
    3: ["ALTER TABLE ledger ADD COLUMN metadata TEXT"],
    # Cost tags: the row's own copy; the ledger_tags table is new, so create_all makes it.
    4: ["ALTER TABLE ledger ADD COLUMN tags TEXT"],
    5: ["ALTER TABLE ledger ADD COLUMN endpoint VARCHAR(32) NOT NULL DEFAULT 'chat'"],
    # Keys with their own limits, expiry, last use and a rotation's overlap.
    6: [
        f"ALTER TABLE api_keys ADD COLUMN {column} {kind}"
        for column, kind in (
            ("budget_day_usd", "FLOAT"),
            ("budget_month_usd", "FLOAT"),
            ("tiers", "TEXT"),
            ("models", "TEXT"),
            ("expires_at", "FLOAT"),
            ("requests_per_min", "INTEGER"),
            ("tokens_per_min", "INTEGER"),
            ("last_used", "FLOAT"),
            ("previous_hash", "VARCHAR(64)"),
            ("previous_until", "FLOAT"),
        )
    ],
    # Hosted providers: prompt-cache reads and writes, counted and priced on their own.
    7: [
        "ALTER TABLE prices ADD COLUMN cached_prompt_per_1k FLOAT",
        "ALTER TABLE prices ADD COLUMN cache_write_per_1k FLOAT",
        "ALTER TABLE ledger ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE ledger ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0",
    ],
    # The audit trail: its two tables are new, so create_all makes them (nothing to alter).
    8: [],
}


class SchemaTooNew(RuntimeError):
    """The database was written by a newer tiergate."""


def open_database(
    url: str, *, durable: bool = False, sqlite_cache_mib: int = 2, pool_size: int = 5
) -> Engine:
    """An engine on ``url`` with the schema at :data:`SCHEMA_VERSION`; ``durable``: every commit
    is on disk when it returns.  At most ``3 × pool_size`` connections (``pool_size`` kept, twice as many
    more for a burst), each SQLite one with a page cache of at most ``sqlite_cache_mib``."""
    pool = {"pool_size": pool_size, "max_overflow": 2 * pool_size}
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False}, **pool)
        pragmas = functools.partial(_sqlite_pragmas, durable=durable, cache_kib=1024 * sqlite_cache_mib)
        event.listen(engine, "connect", pragmas)
    else:
        # A database that stops answering fails a new connection in seconds instead of hanging it.
        engine = create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 5}, **pool)
    migrate(engine)
    if durable and engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            commit = conn.exec_driver_sql("SHOW synchronous_commit").scalar()
        if commit in ("off", "local"):
            log.warning(
                "ledger.sync = 'disk', but the PostgreSQL server runs synchronous_commit = %s", commit
            )
    return engine


def _sqlite_pragmas(
    dbapi_connection: Any, _record: Any, *, durable: bool = False, cache_kib: int = 2048
) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA cache_size=-{int(cache_kib)}")  # negative: KiB, whatever the page size
    cursor.execute("PRAGMA journal_mode=WAL")
    # NORMAL: the ledger's own write-ahead file is what makes a row durable; the database may lag
    # (and the segment with it). FULL: a commit is on disk before the segment holding it is deleted.
    cursor.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)")


def _adds_existing_column(conn: Connection, statement: str) -> bool:
    """A step that adds a column create_all just made (its table was new in this old database)."""
    adds = _ADD_COLUMN.match(statement)
    if adds is None:
        return False
    table, column = adds.groups()
    return column in {c["name"] for c in inspect(conn).get_columns(table)}


def migrate(engine: Engine) -> None:
    metadata.create_all(engine, checkfirst=True)
    with engine.begin() as conn:
        current = conn.execute(select(func.max(schema_version.c.version))).scalar() or 0
        if current > SCHEMA_VERSION:
            raise SchemaTooNew(f"database schema v{current} is newer than this tiergate's v{SCHEMA_VERSION}")
        for version in range(current + 1, SCHEMA_VERSION + 1):
            # A fresh database (no version yet) was just created at the current schema by create_all.
            for statement in _MIGRATIONS.get(version, []) if current else []:
                if not _adds_existing_column(conn, statement):
                    conn.exec_driver_sql(statement)
            conn.execute(schema_version.insert().values(version=version, applied_at=time.time()))
