"""The cloud tier: a pool of vLLM servers over the OpenAI protocol."""

from tiers.cloud._config import (
    DEFAULT_MODEL_DIR,
    DEFAULT_VLLM_CUDA_PYTHON,
    DEFAULT_VLLM_PYTHON,
    DEFAULT_VLM_DIR,
    CloudConfig,
    CloudMediaLimits,
    LocalServer,
    Timeouts,
)
from tiers.cloud._pool import VLLMPool

__all__ = [
    "DEFAULT_MODEL_DIR",
    "DEFAULT_VLLM_CUDA_PYTHON",
    "DEFAULT_VLLM_PYTHON",
    "DEFAULT_VLM_DIR",
    "CloudConfig",
    "CloudMediaLimits",
    "LocalServer",
    "Timeouts",
    "VLLMPool",
]
