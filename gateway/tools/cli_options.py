"""What several ``tiergate`` commands share: the ``--config`` option and loading the settings from
it (a bad file or variable ends the command with exit code 2 and the reason)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.settings import Settings, SettingsError, load_settings

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        envvar="TIERGATE_CONFIG",
        help="TOML settings file. Every setting can also be set as TIERGATE_<SECTION>__<NAME>.",
        exists=True,
        dir_okay=False,
    ),
]

# The model export commands (tiergate models ...).
ExportPythonOption = Annotated[
    Path | None,
    typer.Option(help="Python with torch, transformers, onnx [default: <build_cache_dir>/onnx-export-1]"),
]
ForceOption = Annotated[bool, typer.Option(help="Export even when a build of these inputs exists.")]


def settings_or_exit(config: Path | None, **overrides: Any) -> Settings:
    """The settings from ``config`` (and the environment) with ``overrides``; exit 2 if they do not load."""
    try:
        return load_settings(config, **overrides)
    except SettingsError as exc:
        typer.echo(f"tiergate: {exc}", err=True)
        raise typer.Exit(2) from exc
