"""GPU visibility as the doctor reports it: none, a working driver, a broken one; and whether the bundle's
llama.cpp build fits the box. No GPU here, so a stand-in `nvidia-smi` on PATH plays the driver."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.tools import accel
from gateway.tools.appliance import bundle
from gateway.tools.appliance.doctor import Doctor
from tests import fake_gpu


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


# -- the bundle's llama.cpp build against the box (bundle.json "accelerator"; gateway/tools/accel.py) --


def doctor_for(tmp_path: Path, accelerator: dict[str, str] | None) -> Doctor:
    doctor = Doctor(tmp_path)
    doctor.info = {"version": "0.1.0"} | ({"accelerator": accelerator} if accelerator else {})
    return doctor


def build_findings(doctor: Doctor) -> list[tuple[str, str, str]]:
    return [(f.status, f.detail, f.fix) for f in doctor.check_gpu() if f.check == "gpu-build"]


def test_a_cpu_bundle_on_a_gpu_box_warns_and_says_how_to_build_for_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu.install(tmp_path / "bin", monkeypatch, [fake_gpu.H200])
    for old_or_cpu in (None, {"variant": "cpu", "cuda": ""}):  # a bundle from before: the CPU build
        [(status, detail, fix)] = build_findings(doctor_for(tmp_path, old_or_cpu))
        assert status == "warn" and "NVIDIA H200" in detail and "CPU build" in detail
        assert "--cuda-arch 90" in fix and "tiergate bundle" in fix


def test_a_cuda_bundle_without_a_gpu_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    findings = doctor_for(tmp_path, {"variant": "cuda-90", "cuda": "13.0"}).check_gpu()
    assert [f.status for f in findings] == ["ok", "fail"]  # no GPU: fine for the CPU, not for this build
    assert "cannot load" in findings[1].detail and "--cpu" in findings[1].fix


def test_an_older_driver_and_an_older_gpu_than_the_build_fail(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu.install(tmp_path / "bin", monkeypatch, [fake_gpu.A100])  # 8.0, driver CUDA 12.4
    found = build_findings(doctor_for(tmp_path, {"variant": "cuda-90", "cuda": "13.0"}))
    assert [s for s, _, _ in found] == ["fail", "fail"]
    driver, arch = found
    assert "built with CUDA 13.0" in driver[1] and "supports CUDA 12.4" in driver[1]
    assert "update the NVIDIA driver" in driver[2]
    assert "compute capability 8.0" in arch[1] and "--cuda-arch 80" in arch[2]


def test_a_newer_gpu_than_the_build_runs_its_ptx_and_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_gpu.install(tmp_path / "bin", monkeypatch, [fake_gpu.H200])
    [(status, detail, fix)] = build_findings(doctor_for(tmp_path, {"variant": "cuda-80", "cuda": "12.8"}))
    assert status == "warn" and "PTX" in detail and "--cuda-arch 90" in fix


def test_the_build_that_fits_is_ok(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_gpu.install(tmp_path / "bin", monkeypatch, [fake_gpu.H200, fake_gpu.H200])
    [(status, detail, _)] = build_findings(doctor_for(tmp_path, {"variant": "cuda-90", "cuda": "13.0"}))
    assert (
        status == "ok" and detail == "llama.cpp cuda-90 (CUDA 13.0) fits NVIDIA H200 (9.0), driver CUDA 13.0"
    )


def test_the_variant_a_bundle_records(tmp_path: Path) -> None:
    """What setup.sh wrote into the environment, else what the installed llama_cpp carries (here the
    CPU build: no libggml-cuda)."""
    assert accel.installed_variant(str(tmp_path)) == "cpu"
    (tmp_path / accel.VARIANT_FILE).write_text("cuda-90\n")
    assert accel.installed_variant(str(tmp_path)) == "cuda-90"
    assert bundle._accelerator() == {"variant": "cpu", "cuda": ""}
