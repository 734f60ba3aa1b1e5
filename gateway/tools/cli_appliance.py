"""``tiergate bundle``, ``tiergate install`` and ``tiergate doctor``: the on-prem appliance."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RootOption = Annotated[Path, typer.Option(help="The system's root (a folder, to install or check there).")]


def bundle(
    out: Annotated[Path, typer.Option("--out", "-o", help="A folder, or a .tar / .tar.gz to write.")],
    cloud_model: Annotated[
        Path | None,
        typer.Option(
            help="A converted cloud model folder to include (e.g. <build_cache_dir>/models/smollm2-135m)."
        ),
    ] = None,
    embedding_model: Annotated[
        Path | None,
        typer.Option(
            help="The embedding model's ONNX export to include "
            "[default: <build_cache_dir>/models/all-minilm-l6-v2-onnx, when built]."
        ),
    ] = None,
    source: Annotated[Path | None, typer.Option(help="tiergate's source folder [default: this one].")] = None,
    wheel_cache: Annotated[
        Path | None,
        typer.Option(
            help="Wheels built here (llama-cpp-python) [default: <build_cache_dir>/wheels, or "
            "wheels/cuda-<cc> for the CUDA build setup.sh installed]."
        ),
    ] = None,
) -> None:
    """Build an offline bundle: wheels for this platform (at the versions installed here), the edge
    model, the embedding model, WordNet (the semantic cache's), Whisper (speech to text), optionally
    the cloud model, the default config, a checksum manifest and install.sh."""
    from gateway.pipeline.answers.semantic.wordnet import FOLDER as WORDNET_FOLDER
    from gateway.settings import load_settings
    from gateway.tools.accel import installed_variant
    from gateway.tools.appliance.bundle import BundleError, build
    from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR
    from tiers.speech import DEFAULT_SPEECH_MODEL_DIR

    build_cache = Path(load_settings().build_cache_dir).expanduser()
    # the llama-cpp-python build installed here: setup.sh keeps a CUDA one under wheels/<variant>
    variant = installed_variant()
    cache = wheel_cache or build_cache / "wheels" / ("" if variant in ("cpu", "cuda") else variant)
    if embedding_model is None and (build_cache / DEFAULT_EMBEDDING_MODEL_DIR / "model.onnx").is_file():
        embedding_model = build_cache / DEFAULT_EMBEDDING_MODEL_DIR
    if embedding_model is None:
        typer.echo("no embedding model is built here: the bundle's /v1/embeddings will answer 404")
    wordnet = (
        build_cache / WORDNET_FOLDER if (build_cache / WORDNET_FOLDER / "index.noun").is_file() else None
    )
    if wordnet is None:
        typer.echo("no WordNet here (scripts/setup.sh): the bundle's semantic cache misses synonym swaps")
    speech = build_cache / DEFAULT_SPEECH_MODEL_DIR
    if not (speech / "model.bin").is_file():
        typer.echo("no speech model here (scripts/setup.sh): the bundle's /v1/audio/* will answer 404")
    try:
        build(
            out,
            source=source,
            wheel_cache=cache,
            cloud_model=cloud_model,
            embedding_model=embedding_model,
            wordnet=wordnet,
            speech_model=speech if (speech / "model.bin").is_file() else None,
            say=typer.echo,
        )
    except BundleError as exc:
        typer.echo(f"tiergate bundle: {exc}", err=True)
        raise typer.Exit(1) from exc


def install(
    bundle: Annotated[Path | None, typer.Option("--from", help="The bundle (folder or archive).")] = None,
    root: RootOption = Path("/"),
    dry_run: Annotated[bool, typer.Option(help="Print every file it would write; write nothing.")] = False,
    rollback: Annotated[bool, typer.Option(help="Make the previous release current again.")] = False,
    no_start: Annotated[bool, typer.Option(help="Do not (re)start the service.")] = False,
) -> None:
    """Install (or upgrade to) a bundle into /opt/tiergate as a systemd service; config in
    /etc/tiergate and data in /var/lib/tiergate are kept across upgrades and rollbacks."""
    from gateway.tools.appliance import installer

    args = ["--root", str(root)]
    if bundle is not None:
        args += ["--from", str(bundle)]
    args += [
        flag
        for flag, on in (("--dry-run", dry_run), ("--rollback", rollback), ("--no-start", no_start))
        if on
    ]
    raise typer.Exit(installer.main(args))


def doctor(
    root: RootOption = Path("/"),
    config: Annotated[Path | None, typer.Option(help="[default: <root>/etc/tiergate/tiergate.toml]")] = None,
    json: Annotated[bool, typer.Option("--json", help="Findings as JSON.")] = False,
) -> None:
    """Check the install: versions, model files and their hashes, config, user, unit, data folder and
    disk, the port, Redis/PostgreSQL when shared, GPU visibility. Exit 1 when something must be fixed."""
    from gateway.tools.appliance.doctor import Doctor, as_json, render

    root = root.resolve()
    findings = Doctor(root, config).run()
    typer.echo(as_json(findings) if json else render(findings, root))
    if any(f.status == "fail" for f in findings):
        raise typer.Exit(1)


def reload(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", envvar="TIERGATE_CONFIG", exists=True, dir_okay=False, help="TOML settings."
        ),
    ] = None,
) -> None:
    """Make every gateway sharing shared.redis_url re-read its settings (as SIGHUP does to one); the
    audit trail records it, by cli:<the OS user>."""
    from gateway.accounts.audit import Actor, AuditTrail, Event
    from gateway.accounts.storage import open_database
    from gateway.ops.shared import RELOAD, publish_now
    from gateway.settings import SettingsError, load_settings

    try:
        settings = load_settings(config)
    except SettingsError as exc:
        typer.echo(f"tiergate: {exc}", err=True)
        raise typer.Exit(2) from exc
    shared = settings.shared
    if not shared.redis_url:
        typer.echo(
            "tiergate reload: shared.redis_url is not set; send SIGHUP to the gateway instead", err=True
        )
        raise typer.Exit(2)
    try:
        heard = publish_now(shared.redis_url, shared.prefix, RELOAD, "tiergate reload")
    except Exception as exc:
        typer.echo(f"tiergate reload: Redis at {shared.redis_url.split('@')[-1]}: {exc}", err=True)
        raise typer.Exit(1) from exc
    trail = AuditTrail(open_database(settings.database_url))
    try:
        trail.record(
            Event(
                actor=Actor.of_cli(),
                action="settings.reloaded",
                object_type="settings",
                object_id="*",
                after={"gateways_listening": heard},
            )
        )
    finally:
        trail.engine.dispose()
    typer.echo(f"reload sent; {heard} gateway(s) listening")
