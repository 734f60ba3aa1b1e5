"""The ONNX Runtime engine on the real SmolLM2 export: prompt-prefix reuse answers what a cold engine
answers, and the execution providers handed to onnxruntime put CUDA first when it reports CUDA."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tiers import Completion, Generation, collect
from tiers.edge import EdgeConfig, OnnxTier

EXPORT = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser() / "models"
EXPORT = EXPORT / "smollm2-135m-onnx"
SYSTEM = (
    "You are the assistant of a small travel agency in Lisbon. You answer questions about trips, "
    "hotels, trains and museums in Portugal. Keep answers short, friendly and factual; when you do not "
    "know something, say so and suggest calling the agency. Never invent prices or opening hours."
)

pytestmark = pytest.mark.skipif(
    not (EXPORT / "model.int8.onnx").exists(),
    reason=f"no ONNX export at {EXPORT} (scripts/setup.sh makes it)",
)


def int8_agreement(export: Path) -> int:
    """How many leading greedy tokens of the reference prompts the export's INT8 graph got right, as
    the export's own check recorded it (tiergate-build.json)."""
    record = json.loads((export / "tiergate-build.json").read_text())
    return int(record["agreement"]["model.int8.onnx"].split("/")[0])


def _config(**kw: Any) -> EdgeConfig:
    # The fp32 graph: reuse must give exactly the cold engine's tokens, which an INT8 graph's
    # activations (quantised per tensor at run time, over a different span of tokens) need not.
    return EdgeConfig(backend="onnx", onnx_model_dir=str(EXPORT), onnx_quantized=False, threads=1, **kw)


async def _answer(tier: OnnxTier, gen: Generation) -> Completion:
    return await collect(tier.generate(gen))


def _asking(question: str, max_tokens: int) -> Generation:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    return Generation(messages=messages, max_tokens=max_tokens, temperature=0)


async def test_reused_keys_and_values_give_the_cold_engines_answer() -> None:
    warm = OnnxTier(_config())
    await warm.start()
    try:
        await _answer(warm, _asking("Which museum should I see in Lisbon?", 3))
        await _answer(warm, Generation(messages=[{"role": "user", "content": "Say hello."}], max_tokens=3))
        assert warm.prefixes.hits == 0
        question = _asking("How do I get from Lisbon to Porto?", 12)
        reused = await _answer(warm, question)
        assert warm.prefixes.hits == 1  # the saved state of the first prompt, not the live one
        again = await _answer(warm, question)  # the live cache: all but the last prompt token
    finally:
        await warm.aclose()
    cold = OnnxTier(_config(prefix_cache_mb=0))
    await cold.start()  # its warm-up prompt shares only the template's opening with the question
    try:
        fresh = await _answer(cold, question)
    finally:
        await cold.aclose()
    assert reused.text == fresh.text == again.text
    assert (reused.usage.prompt_tokens, reused.usage.completion_tokens) == (
        fresh.usage.prompt_tokens,
        fresh.usage.completion_tokens,
    )
    # cached_tokens: the prompt tokens whose keys and values were reused
    assert reused.usage.cached_tokens >= 64 > fresh.usage.cached_tokens
    assert again.usage.cached_tokens == again.usage.prompt_tokens - 1


async def test_cuda_goes_first_when_onnxruntime_reports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import onnxruntime as ort

    asked: list[list[str]] = []
    real = ort.InferenceSession

    def session(path: str, options: Any, providers: list[str]) -> Any:
        asked.append(list(providers))
        return real(path, options, providers=[p for p in providers if p in real_available])

    real_available = ort.get_available_providers()
    reported = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    monkeypatch.setattr(ort, "get_available_providers", lambda: reported)
    monkeypatch.setattr(ort, "InferenceSession", session)
    tier = OnnxTier(_config())
    await tier.start()
    try:
        assert asked == [["CUDAExecutionProvider", "CPUExecutionProvider"]]
        # what the session really runs on is what the tier reports (here, without CUDA: the CPU)
        assert "on CPUExecutionProvider" in tier.state().detail
    finally:
        await tier.aclose()
