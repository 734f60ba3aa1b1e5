"""A stand-in ``nvidia-smi`` (and ``nvcc``) on PATH that plays a given GPU: no GPU machine runs the tests,
and the setup plan and the doctor read only what these two commands print."""

from __future__ import annotations

from pathlib import Path

import pytest

# name, driver, compute capability, the driver's CUDA version: what `nvidia-smi` said on such boxes
H200 = ("NVIDIA H200", "580.159.03", "9.0", "13.0")
A100 = ("NVIDIA A100-SXM4-80GB", "550.54.15", "8.0", "12.4")
L4 = ("NVIDIA L4", "570.133.20", "8.9", "12.8")
K80 = ("Tesla K80", "470.256.02", "3.7", "11.4")  # below every build's floor


def install(
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    gpus: list[tuple[str, str, str, str]],
    nvcc: str | None = "13.0",
) -> None:
    """Put the stand-ins in ``folder`` and make it the whole PATH (no real nvidia-smi can answer)."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = "\\n".join(f"{name}, {driver}, {cc}" for name, driver, cc, _ in gpus)
    cuda = gpus[0][3] if gpus else ""
    header = (
        f"| NVIDIA-SMI {gpus[0][1]}    Driver Version: {gpus[0][1]}    CUDA Version: {cuda}     |"
        if gpus
        else ""
    )
    smi = folder / "nvidia-smi"
    smi.write_text(
        f'#!/bin/sh\ncase "$1" in\n  --query-gpu=*) printf "{rows}\\n" ;;\n  *) echo "{header}" ;;\nesac\n'
    )
    smi.chmod(0o755)
    if nvcc:
        tool = folder / "nvcc"
        tool.write_text(f'#!/bin/sh\necho "Cuda compilation tools, release {nvcc}, V{nvcc}.48"\n')
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(folder))
