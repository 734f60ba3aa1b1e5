"""The embedding tier: a sentence-transformers model (all-MiniLM-L6-v2 by default) behind
``POST /v1/embeddings``, on ONNX Runtime in the gateway's process (its inputs from every request batched
into padded calls) or on vLLM pooling servers (``backend = "vllm"``)."""

from tiers.embedding._base import Embedder
from tiers.embedding._batcher import Batcher, Observe, Rows, Vectors, plan_calls
from tiers.embedding._config import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, VllmEmbedding
from tiers.embedding._onnx import OnnxEmbedder
from tiers.embedding._vllm import VllmEmbedder


def make_embedder(config: EmbeddingConfig, observe: Observe | None = None) -> Embedder:
    """The backend ``config.backend`` names: tier "embedding" (in-process) or "embedding-vllm"."""
    if config.backend == "vllm":
        return VllmEmbedder(config, observe=observe)
    return OnnxEmbedder(config, observe=observe)


__all__ = [
    "DEFAULT_EMBEDDING_MODEL_DIR",
    "Batcher",
    "Embedder",
    "EmbeddingConfig",
    "OnnxEmbedder",
    "Rows",
    "Vectors",
    "VllmEmbedder",
    "VllmEmbedding",
    "make_embedder",
    "plan_calls",
]
