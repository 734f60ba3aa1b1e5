"""``tiergate tenants``, ``tiergate keys``, ``tiergate audit`` and ``tiergate report``: work on the
database directly (the one in ``storage.database_url``, by default the data folder's SQLite file).
Each change is recorded in the audit trail as made by ``cli:<the OS user running the command>``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from gateway.accounts.audit import Actor, AuditTrail, export_lines
from gateway.accounts.tenants import KeyLimits, TenantStore, check_tiers, checked_limits
from gateway.errors import GatewayError
from gateway.settings import Settings, SettingsError, load_settings

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", envvar="TIERGATE_CONFIG", help="TOML settings file.", dir_okay=False),
]

tenants_cli = typer.Typer(help="Create and list tenants.", no_args_is_help=True)
keys_cli = typer.Typer(help="Create, list, limit, rotate and revoke API keys.", no_args_is_help=True)
audit_cli = typer.Typer(help="Verify and export the audit trail of changes.", no_args_is_help=True)

# A key's own limits, the same options on `keys create` and `keys update` (0 or "": none of its own).
BudgetDay = Annotated[float | None, typer.Option("--budget-day", help="USD per UTC day (0: none).")]
BudgetMonth = Annotated[float | None, typer.Option("--budget-month", help="USD per UTC month (0: none).")]
Tiers = Annotated[str | None, typer.Option("--tiers", help='Comma list of tiers it may use ("": all).')]
Models = Annotated[
    str | None, typer.Option("--models", help='Comma list of models it may ask for ("": all).')
]
Expires = Annotated[
    str | None, typer.Option("--expires", help='ISO-8601 date-time, e.g. 2027-01-31T00:00:00Z ("": never).')
]
KeyRpm = Annotated[int | None, typer.Option("--rpm", help="Its requests per minute (0: the tenant's only).")]
KeyTpm = Annotated[int | None, typer.Option("--tpm", help="Its tokens per minute (0: the tenant's only).")]


def _limit_changes(
    budget_day: float | None,
    budget_month: float | None,
    tiers: str | None,
    models: str | None,
    expires: str | None,
    rpm: int | None,
    tpm: int | None,
) -> dict[str, Any]:
    given = {
        "budget_day_usd": budget_day,
        "budget_month_usd": budget_month,
        "tiers": tiers,
        "models": models,
        "expires_at": expires,
        "requests_per_min": rpm,
        "tokens_per_min": tpm,
    }
    return {k: v for k, v in given.items() if v is not None}


def _settings(config: Path | None) -> Settings:
    try:
        return load_settings(config)
    except SettingsError as exc:
        typer.echo(f"tiergate: {exc}", err=True)
        raise typer.Exit(2) from exc


def _store(config: Path | None) -> TenantStore:
    from gateway.accounts.storage import open_database

    settings = _settings(config)
    return TenantStore(open_database(settings.database_url), settings.limits.default)


def _fail(exc: GatewayError) -> typer.Exit:
    typer.echo(f"tiergate: {exc.message}", err=True)
    return typer.Exit(1)


def _print(value: object) -> None:
    typer.echo(json.dumps(msgspec.to_builtins(value), indent=2))


@tenants_cli.command("create")
def tenants_create(
    name: str,
    config: ConfigOption = None,
    rpm: Annotated[int | None, typer.Option("--rpm", help="Requests per minute (0: unlimited).")] = None,
    tpm: Annotated[int | None, typer.Option("--tpm", help="Tokens per minute (0: unlimited).")] = None,
    images: Annotated[int | None, typer.Option(help="Image parts per minute.")] = None,
    audio: Annotated[int | None, typer.Option(help="Audio parts per minute.")] = None,
    video: Annotated[int | None, typer.Option(help="Video parts per minute.")] = None,
    video_seconds: Annotated[int | None, typer.Option(help="Seconds of video per minute.")] = None,
    audio_seconds: Annotated[int | None, typer.Option(help="Seconds of audio per minute.")] = None,
) -> None:
    """Create a tenant; limits left out follow limits.default."""
    given = {
        "requests_per_min": rpm,
        "tokens_per_min": tpm,
        "images_per_min": images,
        "audio_per_min": audio,
        "video_per_min": video,
        "video_seconds_per_min": video_seconds,
        "audio_seconds_per_min": audio_seconds,
    }
    try:
        limits = {k: v for k, v in given.items() if v is not None}
        _print(_store(config).create_tenant(name, limits, actor=Actor.of_cli()))
    except GatewayError as exc:
        raise _fail(exc) from exc


@tenants_cli.command("list")
def tenants_list(config: ConfigOption = None) -> None:
    """List tenants with their effective limits (JSON)."""
    _print(_store(config).list_tenants())


@keys_cli.command("create")
def keys_create(
    tenant: Annotated[str | None, typer.Option(help="The tenant the key belongs to.")] = None,
    admin: Annotated[bool, typer.Option("--admin", help="An admin key (all tenants) instead.")] = False,
    name: Annotated[str, typer.Option(help="A label for the key.")] = "",
    role: Annotated[
        str,
        typer.Option(help="With --tenant: tenant (inference only) or tenant-admin (also manages its keys)."),
    ] = "tenant",
    budget_day: BudgetDay = None,
    budget_month: BudgetMonth = None,
    tiers: Tiers = None,
    models: Models = None,
    expires: Expires = None,
    rpm: KeyRpm = None,
    tpm: KeyTpm = None,
    config: ConfigOption = None,
) -> None:
    """Create a key, with its own limits beneath its tenant's, and print it once (only its hash is
    stored)."""
    if (tenant is None) == (not admin):
        typer.echo("tiergate: give --tenant NAME or --admin", err=True)
        raise typer.Exit(2)
    try:
        limits = checked_limits(_limit_changes(budget_day, budget_month, tiers, models, expires, rpm, tpm))
        key = _store(config).create_key(
            tenant, name, role, _known_tiers(limits, config), actor=Actor.of_cli()
        )
    except GatewayError as exc:
        raise _fail(exc) from exc
    typer.echo(f"key {key.id} for {tenant or 'admin'}; shown once, store it now:", err=True)
    typer.echo(key.key)


def _known_tiers(limits: KeyLimits, config: Path | None) -> KeyLimits:
    """A key's tiers must be the configured ones (a misspelt one would keep it off every tier)."""
    return check_tiers(limits, list(_settings(config).tier_configs()))


@keys_cli.command("update")
def keys_update(
    key_id: str,
    budget_day: BudgetDay = None,
    budget_month: BudgetMonth = None,
    tiers: Tiers = None,
    models: Models = None,
    expires: Expires = None,
    rpm: KeyRpm = None,
    tpm: KeyTpm = None,
    config: ConfigOption = None,
) -> None:
    """Change a key's own limits (those given; the others stay). Running gateways apply them within
    auth.key_cache_s."""
    try:
        store = _store(config)
        changes = _limit_changes(budget_day, budget_month, tiers, models, expires, rpm, tpm)
        limits = checked_limits(changes, store.key(key_id).limits)
        checked = _known_tiers(limits, config) if tiers else limits
        _print(store.update_key(key_id, checked, actor=Actor.of_cli()))
    except GatewayError as exc:
        raise _fail(exc) from exc


@keys_cli.command("rotate")
def keys_rotate(
    key_id: str,
    overlap_hours: Annotated[
        float, typer.Option("--overlap-hours", help="Hours the old key keeps working (0.25: 15 minutes).")
    ] = 0.0,
    config: ConfigOption = None,
) -> None:
    """A new secret for the key (same id, limits and budget), printed once; the old one works for
    --overlap-hours more, then is refused (401)."""
    try:
        key = _store(config).rotate_key(key_id, overlap_hours * 3600, actor=Actor.of_cli())
    except GatewayError as exc:
        raise _fail(exc) from exc
    typer.echo(f"key {key.id} rotated; the old one works {overlap_hours:g} h more. Shown once:", err=True)
    typer.echo(key.key)


@keys_cli.command("list")
def keys_list(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's keys.")] = None,
    config: ConfigOption = None,
) -> None:
    """List keys (ids, never the keys themselves) with their limits, expiry and last_used, as JSON."""
    try:
        _print(_store(config).list_keys(tenant))
    except GatewayError as exc:
        raise _fail(exc) from exc


@keys_cli.command("revoke")
def keys_revoke(key_id: str, config: ConfigOption = None) -> None:
    """Revoke a key by its id (the part after tg_); running gateways stop taking it within
    auth.key_cache_s."""
    try:
        _print(_store(config).revoke_key(key_id, actor=Actor.of_cli()))
    except GatewayError as exc:
        raise _fail(exc) from exc


def report(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (default: all).")] = None,
    since: Annotated[str | None, typer.Option(help="From this ISO date or date-time (UTC).")] = None,
    until: Annotated[str | None, typer.Option(help="Until this ISO date (inclusive) or date-time.")] = None,
    group_by: Annotated[
        str,
        typer.Option(
            help="Comma list of day, tier, model, endpoint, tenant, key, tag:<key> (a cost tag's key)."
        ),
    ] = "",
    tag: Annotated[str | None, typer.Option(help="Only requests with this cost tag (team=search).")] = None,
    format: Annotated[str, typer.Option(help="json or csv.")] = "json",
    config: ConfigOption = None,
) -> None:
    """Cost report from the ledger, with the all-cloud counterfactual and the savings."""
    from gateway.accounts.ledger import FORMATS, ReportQuery, cost_report, report_csv

    if format not in FORMATS:
        typer.echo(f"tiergate: --format must be one of {', '.join(FORMATS)}", err=True)
        raise typer.Exit(2)
    store = _store(config)
    try:
        query = ReportQuery.parse(tenant, since, until, group_by, tag)
        tenant_id = store.tenant(query.tenant).id if query.tenant else None
    except GatewayError as exc:
        raise _fail(exc) from exc
    result = cost_report(store.engine, query, tenant_id)
    typer.echo(report_csv(result) if format == "csv" else json.dumps(result, indent=2), nl=format != "csv")


def _trail(config: Path | None) -> AuditTrail:
    from gateway.accounts.storage import open_database

    return AuditTrail(open_database(_settings(config).database_url))


@audit_cli.command("verify")
def audit_verify(config: ConfigOption = None) -> None:
    """Check the audit trail's hash chain: exit 0 when it holds, 1 naming the first row that does not
    (a row edited, or deleted: its number is missing)."""
    trail = _trail(config)
    try:
        checked, broken = trail.verify()
    finally:
        trail.engine.dispose()
    if broken is not None:
        typer.echo(f"tiergate: audit trail broken at row {broken.seq}: {broken.reason}", err=True)
        raise typer.Exit(1)
    typer.echo(f"audit trail holds: {checked} rows")


@audit_cli.command("export")
def audit_export(
    format: Annotated[str, typer.Option(help="jsonl or csv.")] = "jsonl",
    since: Annotated[str | None, typer.Option(help="Rows at or after this ISO-8601 date-time.")] = None,
    config: ConfigOption = None,
) -> None:
    """Print the audit trail, oldest first, as JSON lines or CSV."""
    if format not in ("jsonl", "csv"):
        typer.echo("tiergate: --format must be jsonl or csv", err=True)
        raise typer.Exit(2)
    trail = _trail(config)
    try:
        for chunk in export_lines(trail.rows(since), format):
            typer.echo(chunk, nl=False)
    except GatewayError as exc:
        raise _fail(exc) from exc
    finally:
        trail.engine.dispose()
