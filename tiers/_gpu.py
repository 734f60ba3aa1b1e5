"""Where a llama.cpp engine runs: the GPU layers that ``edge.n_gpu_layers`` resolves to, and the device.

``"auto"`` (the default) offloads every layer when this llama-cpp-python build can offload (built with
``GGML_CUDA=on``: ``scripts/setup.sh`` does so where it finds an NVIDIA GPU) and llama.cpp sees a GPU;
otherwise none.  On an H200 that is 766 tok/s for one client against 347 on 15 CPU threads, and 3,170
batched at 16 clients against 486 (docs/edge.md, "The edge on a GPU").  The GPUs are read from
llama.cpp's own device list (``ggml_backend_dev_*`` in libggml), not from nvidia-smi: it is what the
engine will use, ``CUDA_VISIBLE_DEVICES`` applied, and a CPU build lists none without running anything.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

GpuLayers = int | Literal["auto"]

# enum ggml_backend_dev_type (ggml/include/ggml-backend.h): CPU, GPU, IGPU, ACCEL, META
_DEVICE_TYPE_GPU = 1
# llama.cpp clamps n_gpu_layers to the model's layers (+1 for the output): "every layer"
ALL_LAYERS = 0x7FFFFFFF


@dataclass(frozen=True)
class Gpu:
    """One GPU as llama.cpp lists it: ``CUDA0`` / ``NVIDIA H200``, memory in bytes."""

    name: str
    description: str
    free: int = 0
    total: int = 0

    @property
    def device(self) -> str:
        """``cuda:0 (NVIDIA H200)``: the backend's name as torch writes it, then the card's."""
        backend = self.name.rstrip("0123456789")
        index = self.name[len(backend) :] or "0"
        return f"{backend.lower()}:{index} ({self.description})" if backend else self.description


@dataclass(frozen=True)
class Placement:
    """What the engine is given (``layers`` for llama.cpp's ``n_gpu_layers``) and where that puts it."""

    layers: int
    device: str  # "cpu", or the first GPU's ``Gpu.device``

    @property
    def on_gpu(self) -> bool:
        return self.layers != 0


def resolve(setting: GpuLayers, can_offload: bool, gpus: Sequence[Gpu]) -> Placement:
    """``edge.n_gpu_layers`` against the build and the box: a number is taken as it is (``-1``: all)
    where the build can offload and a GPU is there, ``"auto"`` is all layers there; else 0, the CPU."""
    if not can_offload or not gpus or setting == 0:
        return Placement(0, "cpu")
    layers = ALL_LAYERS if setting in ("auto", -1) else int(setting)
    return Placement(layers, gpus[0].device)


def llama_gpus() -> list[Gpu]:
    """The GPUs this llama.cpp build sees (none for a CPU build), from libggml's device registry."""
    from llama_cpp import _ggml

    lib = _ggml.libggml
    lib.ggml_backend_dev_count.restype = ctypes.c_size_t
    lib.ggml_backend_dev_get.argtypes = [ctypes.c_size_t]
    lib.ggml_backend_dev_get.restype = ctypes.c_void_p
    for fn in (lib.ggml_backend_dev_name, lib.ggml_backend_dev_description):
        fn.argtypes = [ctypes.c_void_p]
        fn.restype = ctypes.c_char_p
    lib.ggml_backend_dev_type.argtypes = [ctypes.c_void_p]
    lib.ggml_backend_dev_type.restype = ctypes.c_int
    lib.ggml_backend_dev_memory.argtypes = [ctypes.c_void_p] + [ctypes.POINTER(ctypes.c_size_t)] * 2
    gpus = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        if lib.ggml_backend_dev_type(dev) != _DEVICE_TYPE_GPU:
            continue
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        lib.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        name = (lib.ggml_backend_dev_name(dev) or b"").decode(errors="replace")
        description = (lib.ggml_backend_dev_description(dev) or b"").decode(errors="replace")
        gpus.append(Gpu(name, description, free.value, total.value))
    return gpus


def placement(setting: GpuLayers) -> Placement:
    """Where a llama.cpp engine loaded now goes (after ``llama_backend_init``; no GPU probe on 0)."""
    if setting == 0:
        return Placement(0, "cpu")
    import llama_cpp

    can = bool(llama_cpp.llama_supports_gpu_offload())
    return resolve(setting, can, llama_gpus() if can else [])
