"""An ONNX export whose INT8 graph its own check found useless is refused with a reason, not served."""

from __future__ import annotations

import json
from pathlib import Path

from tiers import Health
from tiers.edge import EdgeConfig, OnnxTier


def _export(folder: Path, int8_agreement: str) -> Path:
    folder.mkdir()
    (folder / "model.int8.onnx").write_bytes(b"not a graph")
    record = {"agreement": {"model.onnx": "45/45", "model.int8.onnx": int8_agreement}}
    (folder / "tiergate-build.json").write_text(json.dumps(record))
    return folder


async def _started(folder: Path) -> OnnxTier:
    tier = OnnxTier(EdgeConfig(backend="onnx", onnx_model_dir=str(folder), onnx_quantized=True, threads=1))
    await tier.start()
    return tier


async def test_an_int8_graph_that_agrees_on_nothing_is_refused(tmp_path: Path) -> None:
    tier = await _started(_export(tmp_path / "export", "0/45 leading greedy tokens equal to transformers'"))
    try:
        state = tier.state()
        assert state.health is Health.DOWN
        assert "agrees with transformers on 0/45 reference tokens" in state.detail
        assert "onnx_quantized = false" in state.detail
    finally:
        await tier.aclose()


async def test_an_int8_graph_that_agrees_in_part_is_loaded(tmp_path: Path) -> None:
    tier = await _started(_export(tmp_path / "export", "13/45 leading greedy tokens equal to transformers'"))
    try:
        state = tier.state()
        assert state.health is Health.DOWN  # this one fails later, on the graph itself, not on the check
        assert "agrees with transformers" not in state.detail
    finally:
        await tier.aclose()
