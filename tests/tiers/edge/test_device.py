"""Where a llama.cpp engine runs: ``edge.n_gpu_layers`` (``"auto"`` by default) against the build and the
GPUs llama.cpp sees.  The resolution is pure and tested for every case; on this machine (a CPU build, no
GPU) the real build and engine are asked, and ``"auto"`` comes to 0: the CPU."""

from __future__ import annotations

import pytest

from tiers._gpu import ALL_LAYERS, Gpu, Placement, llama_gpus, placement, resolve
from tiers.edge import EdgeConfig, LlamaCppTier
from tiers.edge._batch import BatchedLlamaTier
from tiers.edge._onnx import providers_device

H200 = Gpu("CUDA0", "NVIDIA H200", free=140 << 30, total=143 << 30)


def test_auto_is_every_layer_where_the_build_offloads_and_a_gpu_is_seen() -> None:
    assert resolve("auto", True, [H200]) == Placement(ALL_LAYERS, "cuda:0 (NVIDIA H200)")
    assert resolve(-1, True, [H200]).layers == ALL_LAYERS
    assert resolve(12, True, [H200]) == Placement(12, "cuda:0 (NVIDIA H200)")


@pytest.mark.parametrize(
    ("setting", "can_offload", "gpus"),
    [("auto", False, [H200]), ("auto", True, []), (-1, False, []), (12, True, []), (0, True, [H200])],
)
def test_otherwise_the_cpu(setting: int | str, can_offload: bool, gpus: list[Gpu]) -> None:
    assert resolve(setting, can_offload, gpus) == Placement(0, "cpu")  # type: ignore[arg-type]
    assert not resolve(setting, can_offload, gpus).on_gpu  # type: ignore[arg-type]


def test_device_names() -> None:
    assert Gpu("CUDA1", "NVIDIA L4").device == "cuda:1 (NVIDIA L4)"
    assert Gpu("Vulkan0", "AMD Radeon").device == "vulkan:0 (AMD Radeon)"
    assert providers_device(["CUDAExecutionProvider", "CPUExecutionProvider"]) == "cuda:0"
    assert providers_device(["CPUExecutionProvider"]) == "cpu"


def test_auto_resolves_to_the_cpu_on_this_build() -> None:
    """The real build's answer: this llama-cpp-python is the CPU build, so no GPU and no layers."""
    assert EdgeConfig().n_gpu_layers == "auto"
    assert llama_gpus() == []  # libggml's device list: the CPU alone
    assert placement("auto") == Placement(0, "cpu") and placement(-1) == Placement(0, "cpu")


@pytest.mark.parametrize("engine", [LlamaCppTier, BatchedLlamaTier])
async def test_the_engine_says_where_it_runs(engine: type[LlamaCppTier]) -> None:
    tier = engine(EdgeConfig(max_sequences=2, prefix_cache_mb=0))
    await tier.start()
    try:
        state = tier.state()
        assert state.health.value == "ready" and state.device == "cpu"
        assert state.as_dict()["device"] == "cpu" and "GPU" not in state.detail
        # the timed warm-up: the router's prior for this engine (tests/router/test_learned.py)
        assert state.tokens_per_s > 1 and 0 < state.first_token_s < 30
    finally:
        await tier.aclose()
