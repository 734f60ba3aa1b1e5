"""The ``tiergate`` command line."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer

from gateway.settings import SettingsError, load_settings
from gateway.tools.cli_options import ConfigOption, ExportPythonOption, ForceOption, settings_or_exit

cli = typer.Typer(
    help="tiergate: an OpenAI-compatible gateway that sends each chat request to an edge model "
    "or a vLLM cloud pool.",
    no_args_is_help=True,
    add_completion=False,
)


@cli.command()
def serve(
    config: ConfigOption = None,
    host: Annotated[str | None, typer.Option(help="Address to listen on [default: 127.0.0.1].")] = None,
    port: Annotated[int | None, typer.Option(help="Port to listen on [default: 8080].")] = None,
    allow_open_mode_on_network: Annotated[
        bool | None,
        typer.Option(
            "--allow-open-mode-on-network",
            help="Serve with auth.open_mode on a non-loopback address (no keys: anyone who reaches "
            "the port is the default tenant). Without it, that is refused.",
        ),
    ] = None,
) -> None:
    """Run the gateway: the edge model in-process, the cloud pool (or a local vLLM server it starts).

    Ready on the edge tier at once; the cloud tier joins when its server answers.
    SIGTERM or Ctrl-C stops accepting, lets in-flight requests finish (server.shutdown_grace_s),
    then stops the tiers and any child process. SIGHUP re-reads the settings and applies the
    cloud pool's membership (cloud.urls): new replicas join, removed ones drain.
    """
    from gateway.accounts.storage import DataFolderInUse
    from gateway.tools.server import run

    overrides: dict[str, Any] = {
        "server.host": host,
        "server.port": port,
        "auth.allow_open_mode_on_network": allow_open_mode_on_network or None,
    }
    settings = settings_or_exit(config, **overrides)
    try:
        run(settings, lambda: load_settings(config, **overrides))
    except (SettingsError, DataFolderInUse) as exc:
        typer.echo(f"tiergate: {exc}", err=True)
        raise typer.Exit(2) from exc


models_cli = typer.Typer(
    help="Build the model files the tiers run (once per model version; scripts/setup.sh calls these).",
    no_args_is_help=True,
)
cli.add_typer(models_cli, name="models")


@models_cli.command("export-onnx")
def export_onnx(
    config: ConfigOption = None,
    src: Annotated[
        Path | None,
        typer.Option(help="A transformers model folder [default: <build_cache_dir>/models/smollm2-135m]."),
    ] = None,
    name: Annotated[str | None, typer.Option(help="Output name [default: the source folder's name].")] = None,
    python: ExportPythonOption = None,
    force: ForceOption = False,
) -> None:
    """Export a decoder-only model to ONNX (fp32 and INT8) with its KV cache, for edge.backend = "onnx".

    Output: <build_cache_dir>/models/<name>-onnx-<hash>/, linked as <name>-onnx (edge.onnx_model_dir's
    default). Cached by a hash of the source files: a second run returns at once.
    """
    from gateway.tools.cli_embed import exported
    from gateway.tools.modelbuild.onnx_export import EXPORT_ENV, STEPS
    from gateway.tools.modelbuild.onnx_export import export_onnx as run_export
    from tiers.cloud import DEFAULT_MODEL_DIR

    settings = settings_or_exit(config)
    cache = Path(settings.build_cache_dir).expanduser()
    source = src or cache / DEFAULT_MODEL_DIR
    python = python or cache / EXPORT_ENV / "bin" / "python"
    result = exported(
        "export-onnx",
        len(STEPS),
        lambda progress: run_export(
            source, cache / "models", python, name=name, force=force, progress=progress
        ),
    )
    for file, agreement in result.info.get("agreement", {}).items():
        typer.echo(f"  {file}: {agreement}")


@cli.command("config")
def show_config(config: ConfigOption = None) -> None:
    """Print the effective settings (defaults, then the file, then TIERGATE_* variables) as JSON."""
    settings = settings_or_exit(config)
    typer.echo(msgspec.json.format(msgspec.json.encode(settings), indent=2).decode())


def _add_account_commands() -> None:
    from gateway.tools.cli_accounts import audit_cli, keys_cli, report, tenants_cli
    from gateway.tools.cli_edge import edge_cli
    from gateway.tools.cli_embed import export_embedding

    cli.add_typer(tenants_cli, name="tenants")
    cli.add_typer(keys_cli, name="keys")
    cli.add_typer(audit_cli, name="audit")
    cli.command("report")(report)
    cli.add_typer(edge_cli, name="edge")
    models_cli.command("export-embedding")(export_embedding)


_add_account_commands()


def _add_router_commands() -> None:
    from gateway.tools.cli_router import calibrate, router_cli

    cli.command("calibrate")(calibrate)
    cli.add_typer(router_cli, name="router")


_add_router_commands()


def _add_appliance_commands() -> None:
    from gateway.tools.cli_appliance import bundle, doctor, install, reload

    for command in (bundle, install, doctor, reload):
        cli.command()(command)


_add_appliance_commands()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cli()
