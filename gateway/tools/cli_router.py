"""``tiergate calibrate`` and ``tiergate router ...``: teach the learned router."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated

import typer

from gateway.tools.cli_options import ConfigOption, settings_or_exit

router_cli = typer.Typer(help="The learned router: difficulty classifier, predictors.", no_args_is_help=True)


def _credentials(config: Path | None) -> dict[str, str]:
    path = settings_or_exit(config).data_path / "initial-credentials.json"
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def calibrate(
    config: ConfigOption = None,
    url: Annotated[str | None, typer.Option(help="The gateway [default: its server.host:port].")] = None,
    key: Annotated[str | None, typer.Option(envvar="TIERGATE_KEY", help="A tenant's API key.")] = None,
    admin_key: Annotated[str | None, typer.Option(envvar="TIERGATE_ADMIN_KEY", help="An admin key.")] = None,
    tier: Annotated[list[str] | None, typer.Option(help="Tiers to probe [default: edge and cloud].")] = None,
    requests: Annotated[int, typer.Option(help="Probes per tier.")] = 40,
) -> None:
    """Probe each tier through the running gateway, then refit and save the router's predictors.

    A generated workload goes to each tier pinned; the predictors are saved in
    <data_dir>/router/predictor.json.

    Keys default to the first run's <data_dir>/initial-credentials.json when it is still there.
    """
    from gateway.tools.calibration import calibrate as run

    settings = settings_or_exit(config)
    creds = _credentials(config)
    key = key or creds.get("tenant_key")
    admin_key = admin_key or creds.get("admin_key")
    if not key or not admin_key:
        typer.echo(
            "tiergate: calibrate needs --key and --admin-key (or TIERGATE_KEY/TIERGATE_ADMIN_KEY)", err=True
        )
        raise typer.Exit(2)
    url = url or f"http://{settings.server.host}:{settings.server.port}"
    result = asyncio.run(run(url, key, admin_key, tier or ["edge", "cloud"], requests))
    typer.echo(f"sent {result['sent']} probes, {result['answered']} answered")
    for name, state in result["router"]["tiers"].items():
        metrics = state["metrics"]
        mape = metrics.get("total_holdout_mape")
        shown = f"{mape:.0%}" if mape is not None else "n/a (too few samples)"
        typer.echo(f"  {name}: {state['samples']} samples, held-out MAPE of total latency {shown}")


@router_cli.command("train-difficulty")
def train_difficulty(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="Labelled JSONL.")],
    config: ConfigOption = None,
) -> None:
    """Train the difficulty classifier from labelled examples, one JSON object a line:
    {"prompt": "..."} or {"messages": [...]}, "label": 1/0 (or "hard"/"easy"), "max_tokens" optional.

    Saved as <data_dir>/router/difficulty.json; a running gateway picks it up within
    router.save_interval_s.
    """
    import router
    from gateway.pipeline.routing_service import DIFFICULTY_FILE, write_json

    settings = settings_or_exit(config)
    try:
        examples = router.read_examples(file.read_text().splitlines())
        model = router.train(examples, source=str(file))
    except ValueError as exc:
        typer.echo(f"tiergate: {file}: {exc}", err=True)
        raise typer.Exit(2) from exc
    directory = Path(settings.router.directory).expanduser() if settings.router.directory else None
    out = (directory or settings.data_path / "router") / DIFFICULTY_FILE
    write_json(out, model)
    accuracy = model.metrics.get("holdout_accuracy")
    shown = f"{accuracy:.1%} on {int(model.metrics['holdout_n'])} held out" if accuracy is not None else "n/a"
    typer.echo(f"trained on {model.examples} examples, accuracy {shown}; saved {out}")
    os.utime(out)
