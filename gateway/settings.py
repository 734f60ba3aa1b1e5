"""Settings: typed, loaded once from defaults, a TOML file and ``TIERGATE_*`` variables.

Precedence, lowest first: built-in defaults, the TOML file, the environment.
An environment variable names a setting by its path with ``__`` between the
parts, e.g. ``TIERGATE_SERVER__PORT=9000`` or ``TIERGATE_CLOUD__URLS=http://a:8000,http://b:8000``
(lists are comma separated or JSON).  Unknown settings are an error, not a
silent no-op.
"""

from __future__ import annotations

import json
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from router import AutoRule
from tiers.cloud import DEFAULT_MODEL_DIR, DEFAULT_VLLM_PYTHON, CloudConfig, LocalServer
from tiers.edge import DEFAULT_ONNX_MODEL_DIR, EdgeConfig

ENV_PREFIX = "TIERGATE_"


class SettingsError(ValueError):
    """The configuration cannot be used; the message says which setting and why."""


class ServerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 16 * 1024 * 1024
    # On SIGTERM: stop accepting, let in-flight requests finish for this long.
    shutdown_grace_s: float = 30.0
    log_level: str = "info"
    access_log: bool = False


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # Everything the gateway writes (logs, and later caches, ledger, predictor).
    data_dir: str = "~/.local/share/tiergate"
    # Build outputs of scripts/setup.sh (vLLM's environment, converted models).
    build_cache_dir: str = "~/.cache/tiergate"
    server: ServerSettings = msgspec.field(default_factory=ServerSettings)
    edge: EdgeConfig = msgspec.field(default_factory=EdgeConfig)
    cloud: CloudConfig = msgspec.field(default_factory=CloudConfig)
    routing: AutoRule = msgspec.field(default_factory=AutoRule)

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()

    def edge_config(self) -> EdgeConfig:
        """The edge tier's settings with an empty ONNX folder filled from the build cache."""
        edge = self.edge
        cache = Path(self.build_cache_dir).expanduser()
        return msgspec.structs.replace(
            edge, onnx_model_dir=edge.onnx_model_dir or str(cache / DEFAULT_ONNX_MODEL_DIR)
        )

    def local_vllm(self) -> LocalServer:
        """The local vLLM server's settings with empty paths filled from the build cache."""
        local = self.cloud.local
        cache = Path(self.build_cache_dir).expanduser()
        return msgspec.structs.replace(
            local,
            python=local.python or str(cache / DEFAULT_VLLM_PYTHON),
            model_dir=local.model_dir or str(cache / DEFAULT_MODEL_DIR),
        )


def load_settings(
    config_file: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Build :class:`Settings`; ``overrides`` are dotted paths such as ``server.port``."""
    raw: dict[str, Any] = {}
    if config_file is not None:
        try:
            raw = tomllib.loads(Path(config_file).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise SettingsError(f"cannot read config file {config_file}: {exc}") from exc
    for key, value in (os.environ if environ is None else environ).items():
        if key.startswith(ENV_PREFIX) and key != ENV_PREFIX + "CONFIG":
            path = key[len(ENV_PREFIX) :].lower().split("__")
            _assign(raw, path, _parse_env(path, value))
    for dotted, value in overrides.items():
        if value is not None:
            _assign(raw, dotted.split("."), value)
    try:
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid setting: {exc}") from exc


def _assign(tree: dict[str, Any], path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise SettingsError(f"setting {'.'.join(path)} is inside a value that is not a table")
    node[path[-1]] = value


def _parse_env(path: list[str], value: str) -> Any:
    """Environment values are strings; lists and tables may be JSON, lists also comma separated."""
    if value[:1] in "[{":
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"{ENV_PREFIX}{'__'.join(path).upper()}: invalid JSON: {exc}") from exc
    if _is_list_setting(path):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def _is_list_setting(path: list[str]) -> bool:
    node: Any = Settings
    for part in path:
        hints = typing.get_type_hints(node) if isinstance(node, type) else {}
        if part not in hints:
            return False
        node = hints[part]
    return typing.get_origin(node) is list
