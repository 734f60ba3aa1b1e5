"""The edge tier: a small model in the gateway's own process (llama.cpp on a GGUF, or ONNX Runtime),
as several engine instances of the active version in a registry of versions."""

from tiers._errors import InvalidModel, NothingToRollBack, RegistryError, UnknownModel
from tiers.edge._config import (
    DEFAULT_ONNX_MODEL_DIR,
    EdgeConfig,
    EdgeLimits,
    EdgeModel,
    default_instances,
    default_threads,
)
from tiers.edge._grammar import check_grammar
from tiers.edge._instances import InstanceSet
from tiers.edge._llamacpp import LlamaCppTier, shipped_model_path
from tiers.edge._onnx import OnnxTier
from tiers.edge._registry import EdgeRegistry
from tiers.edge._serial import SerialEngineTier

__all__ = [
    "DEFAULT_ONNX_MODEL_DIR",
    "EdgeConfig",
    "EdgeLimits",
    "EdgeModel",
    "EdgeRegistry",
    "InstanceSet",
    "InvalidModel",
    "LlamaCppTier",
    "NothingToRollBack",
    "OnnxTier",
    "RegistryError",
    "SerialEngineTier",
    "UnknownModel",
    "check_grammar",
    "default_instances",
    "default_threads",
    "shipped_model_path",
]
