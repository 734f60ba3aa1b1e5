"""Choosing the edge engine in settings, and where the ONNX backend looks for its model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.services import build_tiers
from gateway.settings import SettingsError, load_settings
from tiers.edge import EdgeRegistry, LlamaCppTier, OnnxTier


def _engines(settings: object) -> list[object]:
    edge = build_tiers(settings)["edge"]  # type: ignore[arg-type]
    assert isinstance(edge, EdgeRegistry)
    return list(edge.instances)


def test_llamacpp_is_the_default_and_onnx_is_chosen_by_setting() -> None:
    env = {"TIERGATE_CLOUD__ENABLED": "false", "TIERGATE_BUILD_CACHE_DIR": "/opt/tg-cache"}
    assert all(isinstance(e, LlamaCppTier) for e in _engines(load_settings(environ=env)))
    settings = load_settings(environ={**env, "TIERGATE_EDGE__BACKEND": "onnx"})
    assert all(isinstance(e, OnnxTier) for e in _engines(settings))
    assert settings.edge_config().onnx_model_dir == "/opt/tg-cache/models/smollm2-135m-onnx"
    spec = settings.edge_config().model_specs()[0]
    assert (spec.backend, spec.path) == ("onnx", "/opt/tg-cache/models/smollm2-135m-onnx")


def test_instances_and_their_threads_follow_the_settings() -> None:
    env = {"TIERGATE_CLOUD__ENABLED": "false", "TIERGATE_EDGE__INSTANCES": "3", "TIERGATE_EDGE__THREADS": "2"}
    engines = _engines(load_settings(environ=env))
    assert [e.instance for e in engines] == [f"edge-smollm2-135m/{i}" for i in range(3)]  # type: ignore[attr-defined]
    assert {e._config.threads for e in engines} == {2}  # type: ignore[attr-defined]


def test_an_explicit_onnx_folder_and_the_int8_switch_are_kept() -> None:
    env = {"TIERGATE_EDGE__ONNX_MODEL_DIR": "/models/x", "TIERGATE_EDGE__ONNX_QUANTIZED": "true"}
    edge = load_settings(environ=env).edge_config()
    assert (edge.onnx_model_dir, edge.onnx_quantized) == ("/models/x", True)


def test_an_unknown_backend_is_an_error() -> None:
    with pytest.raises(SettingsError, match="backend"):
        load_settings(environ={"TIERGATE_EDGE__BACKEND": "tensorrt"})


def test_the_documented_example_of_edge_models_loads(tmp_path: Path) -> None:
    page = Path(__file__).resolve().parents[3] / "docs" / "edge.md"
    section = page.read_text().split("## Edge models", 1)[1]
    example = re.search(r"```toml\n(.*?)```", section, re.S)
    assert example is not None
    (tmp_path / "edge.toml").write_text(example.group(1))
    edge = load_settings(tmp_path / "edge.toml", environ={"TIERGATE_BUILD_CACHE_DIR": "/c"}).edge_config()
    assert edge.active == "smollm2-q4"
    onnx = edge.for_model(edge.model_specs()[1])
    assert (onnx.backend, onnx.onnx_model_dir, onnx.onnx_quantized) == (
        "onnx",
        "/c/models/smollm2-135m-onnx",
        True,
    )
