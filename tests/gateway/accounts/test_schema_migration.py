"""A database written by an older schema gains the media-seconds limit columns and the ledger's
metadata (v3), tags (v4, and the ledger_tags table), endpoint (v5) and prompt-cache (v7) columns, and
the audit trail's tables (v8), on open."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import inspect, select

from gateway.accounts.storage import open_database
from gateway.accounts.storage._engine import SCHEMA_VERSION
from gateway.accounts.storage._schema import schema_version


def test_a_v1_database_is_migrated_and_a_fresh_one_is_created_current(tmp_path: Path) -> None:
    old = tmp_path / "v1.db"
    with sqlite3.connect(old) as conn:
        conn.executescript(
            """
            CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at FLOAT NOT NULL);
            INSERT INTO schema_version VALUES (1, 0);
            CREATE TABLE tenants (id INTEGER PRIMARY KEY AUTOINCREMENT, name VARCHAR(64) NOT NULL UNIQUE,
                created_at FLOAT NOT NULL, requests_per_min INTEGER, tokens_per_min INTEGER,
                images_per_min INTEGER, audio_per_min INTEGER, video_per_min INTEGER);
            INSERT INTO tenants (name, created_at, images_per_min) VALUES ('acme', 0, 5);
            """
        )
    for path in (old, tmp_path / "fresh.db"):
        engine = open_database(f"sqlite:///{path}")
        columns = {c["name"] for c in inspect(engine).get_columns("tenants")}
        assert {"video_seconds_per_min", "audio_seconds_per_min"} <= columns
        with engine.connect() as conn:
            versions = conn.execute(select(schema_version.c.version)).scalars().all()
        assert max(versions) == SCHEMA_VERSION == 8
        ledger = {c["name"] for c in inspect(engine).get_columns("ledger")}
        assert {"metadata", "tags", "endpoint", "cached_tokens", "cache_write_tokens"} <= ledger
        prices = {c["name"] for c in inspect(engine).get_columns("prices")}
        assert {"cached_prompt_per_1k", "cache_write_per_1k"} <= prices
        assert {"ledger_tags", "audit_log", "audit_head"} <= set(inspect(engine).get_table_names())
        engine.dispose()


def test_a_v2_ledger_gains_the_metadata_and_endpoint_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    engine = open_database(f"sqlite:///{path}")
    engine.dispose()
    with sqlite3.connect(path) as conn:  # back to v2: the ledger without its metadata column
        conn.execute("ALTER TABLE ledger DROP COLUMN metadata")
        conn.execute("ALTER TABLE ledger DROP COLUMN tags")
        conn.execute("DROP TABLE ledger_tags")
        conn.execute("ALTER TABLE ledger DROP COLUMN endpoint")
        conn.execute("DELETE FROM schema_version WHERE version >= 3")
        conn.execute(
            "INSERT INTO ledger (entry_id, request_id, tenant_id, key_id, ts, day, model_asked, tier,"
            " model_used, route_reason, prompt_tokens, completion_tokens, images, audio, video,"
            " total_ms, cache_hit, degraded, status, cost_nusd, counterfactual_nusd)"
            " VALUES ('e1', 'r1', 1, 'k', 0, '2026-12-01', 'edge', 'edge', 'm', '', 1, 1, 0, 0, 0,"
            " 1, 0, 0, 200, 0, 0)"
        )
    engine = open_database(f"sqlite:///{path}")
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT entry_id, metadata, tags, endpoint FROM ledger").all()
    assert rows == [("e1", None, None, "chat")]
    engine.dispose()


def test_a_v6_database_gains_the_prompt_cache_columns_and_keeps_its_prices(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    open_database(f"sqlite:///{path}").dispose()
    with sqlite3.connect(path) as conn:  # back to v6: no prompt-cache columns
        for table, column in (
            ("prices", "cached_prompt_per_1k"),
            ("prices", "cache_write_per_1k"),
            ("ledger", "cached_tokens"),
            ("ledger", "cache_write_tokens"),
        ):
            conn.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        conn.execute("DELETE FROM schema_version WHERE version >= 7")
        conn.execute(
            "INSERT INTO prices (tier, model, prompt_per_1k, completion_per_1k, per_image,"
            " per_media_second, per_gpu_second, effective_from) VALUES ('gpt', '*', 1, 2, 0, 0, 0, 0)"
        )
    engine = open_database(f"sqlite:///{path}")
    with engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT tier, prompt_per_1k, cached_prompt_per_1k FROM prices").all()
    assert rows == [("gpt", 1.0, None)]  # unset: cache reads cost the prompt price
    engine.dispose()
