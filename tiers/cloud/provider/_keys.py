"""A provider tier's key, read from the environment or a file when the tier starts (and again after the
provider refused it). It lives only in the tier's dialect, in the headers of its calls: never in
settings, logs, errors or state (operators see only whether it is set)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from tiers.cloud.provider._config import ProviderConfig


class KeyMissing(Exception):
    """The key's source is named but gives nothing; the message names the source, not a value."""


def read_key(config: ProviderConfig, environ: Mapping[str, str] | None = None) -> str:
    """The key ("" when the tier names no source). Raises :class:`KeyMissing`."""
    if config.api_key_env:
        key = (os.environ if environ is None else environ).get(config.api_key_env, "").strip()
        if not key:
            raise KeyMissing(f"the environment variable {config.api_key_env} (api_key_env) is not set")
        return key
    if config.api_key_file:
        path = Path(config.api_key_file).expanduser()
        try:
            key = path.read_text().strip()
        except OSError as exc:
            raise KeyMissing(
                f"cannot read api_key_file {path}: {exc.strerror or type(exc).__name__}"
            ) from None
        if not key:
            raise KeyMissing(f"api_key_file {path} is empty")
        return key
    return ""
