"""Choosing the edge engine in settings, and where the ONNX backend looks for its model."""

from __future__ import annotations

import pytest

from gateway.app import build_tiers
from gateway.settings import SettingsError, load_settings
from tiers.edge import LlamaCppTier, OnnxTier


def test_llamacpp_is_the_default_and_onnx_is_chosen_by_setting() -> None:
    env = {"TIERGATE_CLOUD__ENABLED": "false", "TIERGATE_BUILD_CACHE_DIR": "/opt/tg-cache"}
    assert isinstance(build_tiers(load_settings(environ=env))["edge"], LlamaCppTier)
    settings = load_settings(environ={**env, "TIERGATE_EDGE__BACKEND": "onnx"})
    assert isinstance(build_tiers(settings)["edge"], OnnxTier)
    assert settings.edge_config().onnx_model_dir == "/opt/tg-cache/models/smollm2-135m-onnx"


def test_an_explicit_onnx_folder_and_the_int8_switch_are_kept() -> None:
    env = {"TIERGATE_EDGE__ONNX_MODEL_DIR": "/models/x", "TIERGATE_EDGE__ONNX_QUANTIZED": "true"}
    edge = load_settings(environ=env).edge_config()
    assert (edge.onnx_model_dir, edge.onnx_quantized) == ("/models/x", True)


def test_an_unknown_backend_is_an_error() -> None:
    with pytest.raises(SettingsError, match="backend"):
        load_settings(environ={"TIERGATE_EDGE__BACKEND": "tensorrt"})
