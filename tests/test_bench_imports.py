"""Every script in bench/ still imports: a bench is run by hand, so nothing else notices when a move
inside gateway/ breaks one (bench.router_path did, when the settings were split by part)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("name", sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__"))
def test_the_bench_script_imports(name: str) -> None:
    importlib.import_module(f"bench.{name}")
