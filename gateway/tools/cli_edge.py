"""``tiergate edge``: the running gateway's edge model registry, through its admin API.

Hot swap and rollback change a running gateway, so these commands talk to it over HTTP
(``--url``, default the configured server address) with an admin key (``--key`` or
``TIERGATE_ADMIN_KEY``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from gateway.settings import SettingsError, load_settings

edge_cli = typer.Typer(
    help="The edge model registry of a running gateway: list, register, activate, roll back.",
    no_args_is_help=True,
)

ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", envvar="TIERGATE_CONFIG", help="TOML settings file.", dir_okay=False),
]
UrlOption = Annotated[
    str | None, typer.Option(help="The gateway [default: http://<server.host>:<server.port>].")
]
KeyOption = Annotated[str, typer.Option("--key", envvar="TIERGATE_ADMIN_KEY", help="An admin API key.")]


def _call(method: str, path: str, config: Path | None, url: str | None, key: str, body: Any = None) -> None:
    if url is None:
        try:
            server = load_settings(config).server
        except SettingsError as exc:
            typer.echo(f"tiergate: {exc}", err=True)
            raise typer.Exit(2) from exc
        url = f"http://{server.host}:{server.port}"
    try:
        # activation loads and warms a model before it answers
        resp = httpx.request(
            method, f"{url}{path}", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=600
        )
    except httpx.HTTPError as exc:
        typer.echo(f"tiergate: cannot reach the gateway at {url}: {exc}", err=True)
        raise typer.Exit(1) from exc
    try:
        answer = resp.json()
    except ValueError:
        answer = {"error": {"message": resp.text}}
    if resp.status_code >= 400:
        typer.echo(
            f"tiergate: {resp.status_code}: {answer.get('error', {}).get('message', answer)}", err=True
        )
        raise typer.Exit(1)
    typer.echo(json.dumps(answer, indent=2))


@edge_cli.command("list")
def list_models(key: KeyOption, config: ConfigOption = None, url: UrlOption = None) -> None:
    """The versions, which is active (with its instances), which rollback would return to."""
    _call("GET", "/admin/api/edge/models", config, url, key)


@edge_cli.command("register")
def register(
    name: str,
    key: KeyOption,
    path: Annotated[
        str, typer.Option(help="A GGUF file, or an ONNX export folder [default: the shipped model].")
    ] = "",
    backend: Annotated[str, typer.Option(help="llamacpp or onnx.")] = "llamacpp",
    quantized: Annotated[bool, typer.Option(help="onnx: the INT8 graph.")] = False,
    modalities: Annotated[str, typer.Option(help="Comma separated: text,image,audio,video.")] = "text",
    context_tokens: Annotated[int, typer.Option(help="The context it is run with.")] = 2048,
    quality: Annotated[float, typer.Option(help="Declared quality level in [0, 1].")] = 0.5,
    config: ConfigOption = None,
    url: UrlOption = None,
) -> None:
    """Register a version (not yet served); its files must exist on the gateway's machine."""
    body = {
        "name": name,
        "backend": backend,
        "path": path,
        "quantized": quantized,
        "modalities": [m.strip() for m in modalities.split(",") if m.strip()],
        "context_tokens": context_tokens,
        "quality": quality,
    }
    _call("POST", "/admin/api/edge/models", config, url, key, body)


@edge_cli.command("activate")
def activate(name: str, key: KeyOption, config: ConfigOption = None, url: UrlOption = None) -> None:
    """Serve NAME: its instances load and warm, new requests go to it, the old version finishes its own."""
    _call("POST", "/admin/api/edge/models/activate", config, url, key, {"name": name})


@edge_cli.command("rollback")
def rollback(key: KeyOption, config: ConfigOption = None, url: UrlOption = None) -> None:
    """Serve the version that was active before the current one again (a hot swap too)."""
    _call("POST", "/admin/api/edge/models/rollback", config, url, key)
