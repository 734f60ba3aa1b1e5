"""The audit trail on the real databases (SQLite file, PostgreSQL server): its hash chain, what
`tiergate audit verify` finds when a row is edited or deleted behind its back, appends from several
engines at once (several gateways on one database), filters and scopes, exports, and secrets."""

from __future__ import annotations

import concurrent.futures
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text
from typer.testing import CliRunner

from gateway.accounts.admin import AdminService
from gateway.accounts.audit import Actor, AuditQuery, AuditTrail, Event, export_lines
from gateway.accounts.storage import open_database
from gateway.accounts.tenants import (
    ADMIN,
    TENANT,
    TENANT_ADMIN,
    Authenticator,
    Caller,
    TenantStore,
    checked_limits,
)
from gateway.accounts.tenants._settings import TenantLimits
from gateway.errors import InvalidRequest, PermissionDenied
from gateway.tools.cli import cli

BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fresh database of the backend asked for (PostgreSQL: a new database on the session's server),
    and a settings file that points the CLI at it."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'data' / 'tiergate.db'}"
    else:
        server: str = request.getfixturevalue("postgres_url")
        name = f"audit_{uuid.uuid4().hex[:10]}"
        host = server.removeprefix("postgresql+psycopg://").split("/")[0]
        user, _, address = host.partition("@")
        hostname, _, port = address.partition(":")
        with psycopg.connect(
            f"host={hostname} port={port} user={user} dbname=postgres", autocommit=True
        ) as c:
            c.execute(f"CREATE DATABASE {name}")
        url = server.rsplit("/", 1)[0] + f"/{name}"
    config = tmp_path / "tiergate.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n[storage]\ndatabase_url = "{url}"\n')
    yield url, config


def verify(config: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["audit", "verify", "--config", str(config)])
    return result.exit_code, result.output


def some_changes(engine: Engine) -> list[str]:
    """Five rows, as the stores write them: a tenant, a key created, limited, rotated, revoked. The
    keys made (each shown once) are returned, to look for in the rows."""
    store = TenantStore(engine, TenantLimits())
    cli_user = Actor.of_cli()
    store.create_tenant("acme", actor=cli_user)
    made = store.create_key("acme", "ci", actor=cli_user)
    store.update_key(made.id, checked_limits({"budget_day_usd": 3}), actor=cli_user)
    rotated = store.rotate_key(made.id, 60, actor=cli_user)
    store.revoke_key(made.id, actor=cli_user)
    return [made.key, rotated.key]


@pytest.mark.parametrize("database", BACKENDS, indirect=True)
def test_verify_names_the_row_edited_or_deleted_directly_in_the_database(
    database: tuple[str, Path],
) -> None:
    url, config = database
    engine = open_database(url)
    some_changes(engine)
    assert verify(config) == (0, "audit trail holds: 5 rows\n")
    with engine.begin() as conn:
        row3 = dict(conn.execute(text("SELECT * FROM audit_log WHERE seq = 3")).one()._mapping)
        conn.execute(text("UPDATE audit_log SET after = :a WHERE seq = 3"), {"a": '{"budget_day_usd":0}'})
    code, output = verify(config)
    assert code == 1 and "row 3" in output and "edited" in output, output
    with engine.begin() as conn:  # put it back: the chain holds again
        conn.execute(text("UPDATE audit_log SET after = :a WHERE seq = 3"), {"a": row3["after"]})
        conn.execute(text("DELETE FROM audit_log WHERE seq = 2"))
    code, output = verify(config)
    assert code == 1 and "row 2" in output and "deleted" in output, output
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM audit_log WHERE seq >= 2"))  # the newest rows, chain intact below
    code, output = verify(config)
    assert code == 1 and "rows 2..5 are missing" in output, output
    engine.dispose()


@pytest.mark.parametrize("database", BACKENDS, indirect=True)
def test_gateways_appending_at_once_never_fork_the_chain(database: tuple[str, Path]) -> None:
    url, config = database
    open_database(url).dispose()  # the schema, once
    engines = [open_database(url) for _ in range(6)]  # six gateways on one database

    def append(n: int) -> list[int]:
        trail = AuditTrail(engines[n])
        event = Event(actor=Actor.of_key(f"k{n}"), action="test.appended", object_type="t", object_id=str(n))
        return [trail.record(event).seq for _ in range(15)]

    try:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            seqs = [s for got in pool.map(append, range(6)) for s in got]
        assert sorted(seqs) == list(range(1, 91))  # every append its own number: no two read one head
        assert AuditTrail(engines[0]).verify() == (90, None)
        assert verify(config)[0] == 0
    finally:
        for engine in engines:
            engine.dispose()


def test_secrets_never_enter_a_row_and_rows_export_as_jsonl_and_csv(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'tiergate.db'}")
    keys = some_changes(engine)
    trail = AuditTrail(engine)
    trail.record(
        Event(
            actor=Actor.of_person("ana@example.com", "10.0.0.7"),
            action="provider.set",
            object_type="provider",
            object_id="openai",
            before={"api_key": "sk-old", "nested": [{"client_secret": "cs-1", "kept": 1}]},
            after={"Authorization": "Bearer sk-new", "password": "p", "token": "t", "model": "gpt"},
        )
    )
    rows = list(trail.rows())
    assert [r.action for r in rows] == [
        "tenant.created",
        "key.created",
        "key.limits_changed",
        "key.rotated",
        "key.revoked",
        "provider.set",
    ]
    assert rows[-1].before == {"nested": [{"kept": 1}]} and rows[-1].after == {"model": "gpt"}
    assert rows[2].before["limits"]["budget_day_usd"] == 0 and rows[2].after["limits"]["budget_day_usd"] == 3
    assert rows[0].actor == Actor.of_cli().id and rows[-1].address == "10.0.0.7"
    jsonl = "".join(export_lines(trail.rows(), "jsonl"))
    csv_text = "".join(export_lines(trail.rows(), "csv"))
    hashes = [r[0] for r in engine.connect().execute(text("SELECT key_hash FROM api_keys"))]
    for secret in [*keys, *(k.split("_")[2] for k in keys), *hashes, "sk-old", "sk-new", "cs-1"]:
        assert secret not in jsonl and secret not in csv_text
    assert [json.loads(line)["seq"] for line in jsonl.splitlines()] == [1, 2, 3, 4, 5, 6]
    assert csv_text.splitlines()[0].startswith("seq,at,actor,actor_kind,address,action")
    assert len(csv_text.splitlines()) == 7
    later = rows[3].at
    assert [r.seq for r in trail.rows(since=later)] == [4, 5, 6]
    exported = CliRunner().invoke(
        cli, ["audit", "export", "--format", "csv", "--since", later, "--config", str(_config(tmp_path))]
    )
    assert exported.exit_code == 0 and len(exported.output.splitlines()) == 4, exported.output
    engine.dispose()


def _config(tmp_path: Path) -> Path:
    config = tmp_path / "tiergate.toml"
    url = f"sqlite:///{tmp_path / 'tiergate.db'}"
    config.write_text(f'data_dir = "{tmp_path}"\n[storage]\ndatabase_url = "{url}"\n')
    return config


async def test_filters_pages_and_a_tenant_admin_reads_only_its_tenants_rows(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'tiergate.db'}")
    store = TenantStore(engine, TenantLimits())
    admin_actor = Actor.of_key("boss")
    for name in ("acme", "globex"):
        store.create_tenant(name, actor=admin_actor)
        store.create_key(name, "k", actor=Actor.of_cli())
    service = AdminService(store, Authenticator(store, cache_s=1))
    acme = store.tenant("acme")
    admin = Caller(key_id="boss", role=ADMIN, tenant=None)
    page = await service.audit(admin, AuditQuery(limit=3))
    assert [r.seq for r in page["data"]] == [4, 3, 2] and page["has_more"]
    rest = await service.audit(admin, AuditQuery(limit=3, after=page["last_id"]))
    assert [r.seq for r in rest["data"]] == [1] and not rest["has_more"]
    by_actor = await service.audit(admin, AuditQuery(actor="boss"))
    assert [r.action for r in by_actor["data"]] == ["tenant.created", "tenant.created"]
    keyed = await service.audit(admin, AuditQuery(object_type="tenant", object_id="globex"))
    assert [r.seq for r in keyed["data"]] == [3]
    assert (await service.audit(admin, AuditQuery(until="2000-01-01")))["data"] == []
    assert len((await service.audit(admin, AuditQuery(since="2000-01-01T00:00:00Z")))["data"]) == 4
    tenant_admin = Caller(key_id="ta", role=TENANT_ADMIN, tenant=acme)
    mine = await service.audit(tenant_admin, AuditQuery())
    assert {r.tenant for r in mine["data"]} == {"acme"} and len(mine["data"]) == 2
    other = await service.audit(tenant_admin, AuditQuery(tenants=frozenset({"globex"})))
    assert other["data"] == []  # another tenant's rows: none, even when asked for
    with pytest.raises(PermissionDenied):
        await service.audit(Caller(key_id="w", role=TENANT, tenant=acme), AuditQuery())
    with pytest.raises(InvalidRequest):
        await service.audit(admin, AuditQuery(since="yesterday"))
    with pytest.raises(InvalidRequest):
        await service.audit(admin, AuditQuery(limit=0))
    engine.dispose()
