"""Where the transcriber runs: CUDA when CTranslate2 sees a GPU (or when asked), else the CPU."""

from __future__ import annotations

import ctranslate2
import pytest

from tiers.speech import SpeechConfig
from tiers.speech._whisper import pick_device


def test_auto_takes_cuda_only_where_a_gpu_is_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    assert pick_device(SpeechConfig()) == ("cpu", "int8")
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 1)
    assert pick_device(SpeechConfig()) == ("cuda", "int8_float16")
    assert pick_device(SpeechConfig(device="cpu")) == ("cpu", "int8")


def test_cuda_can_be_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctranslate2, "get_cuda_device_count", lambda: 0)
    assert pick_device(SpeechConfig(device="cuda", cuda_compute_type="float16")) == ("cuda", "float16")
