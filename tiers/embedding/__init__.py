"""The embedding tier: a sentence-transformers model (all-MiniLM-L6-v2 by default) on ONNX Runtime, in
the gateway's process, with its inputs from every request batched into padded ONNX calls."""

from tiers.embedding._batcher import Batcher, Rows, Vectors, plan_calls
from tiers.embedding._config import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig
from tiers.embedding._onnx import OnnxEmbedder

__all__ = [
    "DEFAULT_EMBEDDING_MODEL_DIR",
    "Batcher",
    "EmbeddingConfig",
    "OnnxEmbedder",
    "Rows",
    "Vectors",
    "plan_calls",
]
