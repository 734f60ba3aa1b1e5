"""Open the database: SQLite gets WAL and a busy timeout; the schema is created or checked."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, inspect, select

from gateway.accounts.storage._schema import metadata, schema_version

# Bump with a migration step in _MIGRATIONS when a table changes.
SCHEMA_VERSION = 3
# version -> statements that bring a database from version-1 to version.
_MIGRATIONS: dict[int, list[str]] = {
    2: [
        "ALTER TABLE tenants ADD COLUMN video_seconds_per_min INTEGER",
        "ALTER TABLE tenants ADD COLUMN audio_seconds_per_min INTEGER",
    ],
    3: ["ALTER TABLE ledger ADD COLUMN metadata TEXT"],
}


class SchemaTooNew(RuntimeError):
    """The database was written by a newer tiergate."""


def open_database(url: str) -> Engine:
    """An engine on ``url`` with the schema at :data:`SCHEMA_VERSION`."""
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        # A database that stops answering fails a new connection in seconds instead of hanging it.
        engine = create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": 5})
    migrate(engine)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # The ledger's own write-ahead file is what makes a row durable; the database may lag.
    cursor.execute("PRAGMA synchronous=NORMAL")
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
