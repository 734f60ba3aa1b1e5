"""The Grafana dashboard in the repo is current and covers every metric family the gateway exports."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from gateway.ops.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "tiergate.json"


def builder():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "build_dashboard", DASHBOARD.with_name("build_dashboard.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dashboard_file_is_what_its_builder_writes() -> None:
    assert DASHBOARD.read_text() == builder().render(), "run deploy/grafana/build_dashboard.py"


def test_every_exported_family_is_on_the_dashboard() -> None:
    board = json.loads(DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in board["panels"] for t in p.get("targets", []))
    used = set(re.findall(r"tiergate_[a-z_]+", exprs))
    families = {f.name for f in Metrics().registry.collect()}
    assert families, "no families?"
    missing = {
        name
        for name in families
        if not any(
            u == name or u.startswith(name + "_") for u in used
        )  # counters: _total, histograms: _bucket
    }
    assert not missing, f"families with no panel: {sorted(missing)}"


def test_panels_do_not_overlap_and_ids_are_unique() -> None:
    board = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        g = p["gridPos"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, p["title"]
                cells.add((x, y))
