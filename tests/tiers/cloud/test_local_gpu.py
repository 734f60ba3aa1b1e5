"""The local vLLM server on a GPU box: scripts/setup.sh's CUDA environment (its .tiergate-ready says
"cuda") is preferred by the default settings and started with its share of the GPU's memory."""

from __future__ import annotations

from pathlib import Path

from gateway.settings import load_settings
from tiers.cloud import DEFAULT_VLLM_CUDA_PYTHON, DEFAULT_VLLM_PYTHON, LocalServer
from tiers.cloud._local import LocalVLLMServer


def env(cache: Path, name: str, marker: str) -> Path:
    python = cache / name
    python.parent.mkdir(parents=True)
    python.write_text("")
    (python.parent.parent / ".tiergate-ready").write_text(marker)
    return python


def test_the_cuda_build_gets_its_share_of_the_gpu_and_the_cpu_build_none(tmp_path: Path) -> None:
    cuda = env(tmp_path, DEFAULT_VLLM_CUDA_PYTHON, "cuda\n")
    cpu = env(tmp_path, DEFAULT_VLLM_PYTHON, "")  # setup.sh `touch`es the CPU one
    on_gpu = LocalVLLMServer(LocalServer(python=str(cuda), gpu_memory_utilization=0.6), None)
    assert on_gpu.on_gpu
    command = on_gpu.command()
    assert command[command.index("--gpu-memory-utilization") + 1] == "0.6"
    on_cpu = LocalVLLMServer(LocalServer(python=str(cpu)), None)
    assert not on_cpu.on_gpu and "--gpu-memory-utilization" not in on_cpu.command()


def test_the_default_python_is_the_cuda_build_where_setup_made_one(tmp_path: Path) -> None:
    settings = load_settings(environ={"TIERGATE_BUILD_CACHE_DIR": str(tmp_path)})
    assert settings.local_vllm().python == str(tmp_path / DEFAULT_VLLM_PYTHON)  # neither: the CPU one
    env(tmp_path, DEFAULT_VLLM_PYTHON, "")
    assert settings.local_vllm().python == str(tmp_path / DEFAULT_VLLM_PYTHON)
    env(tmp_path, DEFAULT_VLLM_CUDA_PYTHON, "cuda\n")
    assert settings.local_vllm().python == str(tmp_path / DEFAULT_VLLM_CUDA_PYTHON)
