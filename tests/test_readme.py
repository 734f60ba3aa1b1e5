"""The README's configuration reference is real: it loads, and every value it shows is the default."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import msgspec

from gateway.settings import load_settings

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_configuration_reference_loads_and_shows_the_defaults(tmp_path: Path) -> None:
    section = README.read_text().split("## Configuration", 1)[1]
    block = re.search(r"```toml\n(.*?)```", section, re.S)
    assert block is not None
    config = tmp_path / "tiergate.toml"
    config.write_text(block.group(1))
    documented = load_settings(config, environ={})  # unknown settings would raise
    defaults = load_settings(environ={})
    assert msgspec.to_builtins(documented) == msgspec.to_builtins(defaults)
    assert tomllib.loads(block.group(1))  # and it is plain TOML
