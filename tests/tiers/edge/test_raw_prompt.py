"""Legacy completions on the edge, in both engines: a raw prompt (``Generation.prompt``) is tokenized as
it is, no chat template, with only what the model's tokenizer adds to a plain text (SmolLM2: nothing,
no BOS), so the engine gets exactly the tokenizer's ids of the prompt; a chat is still templated."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tiers import Generation, collect
from tiers.edge import EdgeConfig, LlamaCppTier, OnnxTier, _decode, _llamacpp, _onnx
from tiers.edge._serial import SerialEngineTier
from tiers.edge._text import prompt_text, render_prompt

EXPORT = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
EXPORT = EXPORT / "models" / "smollm2-135m-onnx"
PROMPT = "The capital of France is"


def test_a_raw_prompt_is_not_rendered_and_asks_for_the_tokenizers_own_specials() -> None:
    raw = Generation(messages=[{"role": "user", "content": PROMPT}], prompt=PROMPT)
    assert prompt_text(raw, "<s>", "</s>") == (PROMPT, True)
    chat = Generation(messages=[{"role": "user", "content": PROMPT}])
    assert prompt_text(chat) == (render_prompt(chat.messages), False)


def _tokenizer_ids(text: str) -> list[int]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(EXPORT / "tokenizer.json"))
    return list(tokenizer.encode(text, add_special_tokens=True).ids)


@pytest.fixture(scope="module", params=["llama", "onnx"])
async def tier(request: pytest.FixtureRequest) -> AsyncIterator[SerialEngineTier]:
    if not (EXPORT / "tokenizer.json").exists():
        pytest.skip(f"no ONNX export at {EXPORT} (scripts/setup.sh makes it)")
    engine: SerialEngineTier
    if request.param == "llama":
        engine = LlamaCppTier(EdgeConfig(threads=1))
    else:
        engine = OnnxTier(EdgeConfig(backend="onnx", onnx_model_dir=str(EXPORT), threads=1))
    await engine.start()
    assert engine.state().health.value == "ready", engine.state().detail
    yield engine
    await engine.aclose()


@pytest.fixture
def prompts(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """The prompt token ids each generation's decode loop was given."""
    seen: list[list[int]] = []

    class Recording(_decode.Decoder):
        def run(self, prompt: list[int], *args: Any, **kwargs: Any) -> bool:
            seen.append(list(prompt))
            return super().run(prompt, *args, **kwargs)

    monkeypatch.setattr(_llamacpp, "Decoder", Recording)
    monkeypatch.setattr(_onnx, "Decoder", Recording)
    return seen


async def test_the_engine_gets_exactly_the_prompts_tokens(
    tier: SerialEngineTier, prompts: list[list[int]]
) -> None:
    gen = Generation(
        messages=[{"role": "user", "content": PROMPT}], prompt=PROMPT, max_tokens=4, temperature=0.0
    )
    answer = await collect(tier.generate(gen))
    assert prompts == [_tokenizer_ids(PROMPT)]
    assert answer.usage.prompt_tokens == len(_tokenizer_ids(PROMPT)) == 5
    assert answer.usage.completion_tokens == 4 and answer.text.strip()


async def test_the_same_text_as_a_chat_is_templated(tier: SerialEngineTier, prompts: list[list[int]]) -> None:
    gen = Generation(messages=[{"role": "user", "content": PROMPT}], max_tokens=2, temperature=0.0)
    await collect(tier.generate(gen))
    assert prompts[0] == _tokenizer_ids(render_prompt(gen.messages))
    assert len(prompts[0]) > len(_tokenizer_ids(PROMPT)) + 5  # the system turn and the role markers
