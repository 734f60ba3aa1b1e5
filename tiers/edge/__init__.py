"""The edge tier: a small model in the gateway's own process (llama.cpp, GGUF)."""

from tiers.edge._config import EdgeConfig
from tiers.edge._llamacpp import LlamaCppTier, shipped_model_path

__all__ = ["EdgeConfig", "LlamaCppTier", "shipped_model_path"]
