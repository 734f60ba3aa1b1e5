"""GPU visibility as the doctor reports it: none, a working driver, a broken one. No GPU here, so a
stand-in `nvidia-smi` on PATH plays the driver (its two behaviours are the faults to report)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.tools.appliance.doctor import Doctor


def fake_smi(folder: Path, body: str) -> None:
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)


def test_no_gpu_is_fine_the_edge_model_runs_on_the_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    [finding] = Doctor(tmp_path).check_gpu()
    assert finding.status == "ok" and "CPU" in finding.detail


def test_visible_gpus_are_listed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_smi(tmp_path, 'echo "GPU 0: NVIDIA H200 (UUID: GPU-1)"; echo "GPU 1: NVIDIA H200 (UUID: GPU-2)"')
    monkeypatch.setenv("PATH", str(tmp_path))
    [finding] = Doctor(tmp_path).check_gpu()
    assert finding.status == "ok" and finding.detail.startswith("2 GPU(s): GPU 0: NVIDIA H200")


def test_a_broken_driver_is_a_warning_with_a_fix(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_smi(
        tmp_path,
        'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver" >&2; exit 9',
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    [finding] = Doctor(tmp_path).check_gpu()
    assert finding.status == "warn" and "could not communicate" in finding.detail
    assert "driver" in finding.fix
