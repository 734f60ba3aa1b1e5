"""The edge tier: a small model in the gateway's own process (llama.cpp on a GGUF, or ONNX Runtime)."""

from tiers.edge._config import DEFAULT_ONNX_MODEL_DIR, EdgeConfig
from tiers.edge._llamacpp import LlamaCppTier, shipped_model_path
from tiers.edge._onnx import OnnxTier
from tiers.edge._serial import SerialEngineTier, default_threads

__all__ = [
    "DEFAULT_ONNX_MODEL_DIR",
    "EdgeConfig",
    "LlamaCppTier",
    "OnnxTier",
    "SerialEngineTier",
    "default_threads",
    "shipped_model_path",
]
