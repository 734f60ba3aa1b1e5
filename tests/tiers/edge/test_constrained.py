"""The edge's decode loop on the real SmolLM2 in both engines (llama.cpp on the shipped GGUF, ONNX
Runtime on the fp32 export when it is there): JSON answers that follow their schema, tool calls as
tool-call events, logprobs, n answers, and the sampling extras.  Greedy and short, to stay fast; one
engine per module and one tools prompt for every tools test, so its prefill is paid once."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tiers import (
    ALL_ABILITIES,
    ChoiceDone,
    Completion,
    Event,
    Finished,
    Generation,
    TextDelta,
    TierRejected,
    ToolCallDelta,
    assemble,
)
from tiers.edge import EdgeConfig, LlamaCppTier, OnnxTier
from tiers.edge._serial import SerialEngineTier

jsonschema_rs = pytest.importorskip("jsonschema_rs")
pytest.importorskip("llguidance")

EXPORT = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
EXPORT = EXPORT / "models" / "smollm2-135m-onnx"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CLOCK = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}
TOOLS = [WEATHER, CLOCK]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
CITY = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module", params=["llama", "onnx"])
async def tier(request: pytest.FixtureRequest) -> AsyncIterator[SerialEngineTier]:
    engine: SerialEngineTier
    if request.param == "llama":
        engine = LlamaCppTier(EdgeConfig(threads=1))
    else:
        if not (EXPORT / "model.onnx").exists():
            pytest.skip(f"no ONNX export at {EXPORT} (scripts/setup.sh makes it)")
        engine = OnnxTier(EdgeConfig(backend="onnx", onnx_model_dir=str(EXPORT), threads=1))
    await engine.start()
    assert engine.state().health.value == "ready", engine.state().detail
    yield engine
    await engine.aclose()


async def run(tier: SerialEngineTier, **kw: Any) -> tuple[list[Event], Completion]:
    gen = Generation(**{"messages": ASK, "max_tokens": 40, "temperature": 0.0, **kw})
    events = [e async for e in tier.generate(gen)]
    return events, assemble(events)


def token_id(tier: SerialEngineTier, piece: list[int] | None) -> int:
    vocab = tier._vocab  # type: ignore[attr-defined]
    return int(vocab.shown.index(bytes(piece or [])))


async def test_json_schema_answers_follow_the_schema(tier: SerialEngineTier) -> None:
    assert tier.capabilities.abilities == ALL_ABILITIES
    format = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY, "strict": True}}
    ask = [{"role": "user", "content": "Give the largest city of France and its population as JSON."}]
    _, answer = await run(tier, messages=ask, response_format=format)
    assert answer.finish_reason == "stop"
    jsonschema_rs.validate(CITY, json.loads(answer.text))
    _, answer = await run(tier, response_format={"type": "json_object"})
    assert isinstance(json.loads(answer.text), dict)


async def test_named_and_required_tool_choices_make_tool_call_events(tier: SerialEngineTier) -> None:
    for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
        events, answer = await run(tier, tools=TOOLS, tool_choice=choice, parallel_tool_calls=False)
        assert not [e for e in events if isinstance(e, TextDelta)]
        first = next(e for e in events if isinstance(e, ToolCallDelta))
        assert re.fullmatch(r"call_[A-Za-z0-9]{24}", first.id) and first.name and not first.arguments
        (call,) = answer.choices[0].tool_calls
        assert answer.finish_reason == "tool_calls"
        assert call.name == "get_weather" or choice == "required"
        arguments = json.loads(call.arguments)
        if call.name == "get_weather":
            jsonschema_rs.validate(WEATHER["function"]["parameters"], arguments)  # type: ignore[index]
        else:
            assert arguments == {}


async def test_auto_answers_in_text_or_a_valid_call_and_takes_a_tool_result(tier: SerialEngineTier) -> None:
    _, answer = await run(tier, tools=TOOLS)
    choice = answer.choices[0]
    assert choice.text or choice.tool_calls
    for call in choice.tool_calls:
        json.loads(call.arguments)
    assert (
        answer.finish_reason == "tool_calls"
        if choice.tool_calls
        else answer.finish_reason in ("stop", "length")
    )
    called = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    result = {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"}
    _, answer = await run(
        tier, messages=[*ASK, called, result], tools=TOOLS, tool_choice="none", max_tokens=12
    )
    assert answer.text.strip() and not answer.choices[0].tool_calls
    assert answer.usage.prompt_tokens > 200  # the tools, the call and its result are in the prompt


async def test_logprobs_come_with_their_alternatives(tier: SerialEngineTier) -> None:
    _, answer = await run(tier, logprobs=True, top_logprobs=3, max_tokens=4)
    tokens = answer.choices[0].logprobs or []
    assert len(tokens) == 4 and "".join(t.token for t in tokens) == answer.text
    for t in tokens:
        assert len(t.top) == 3 and t.top[0].token == t.token  # greedy: the likeliest token
        assert t.logprob <= 0 and t.top[0].logprob >= t.top[1].logprob >= t.top[2].logprob
        assert sum(math.exp(a.logprob) for a in t.top) <= 1 + 1e-6
        assert bytes(t.bytes or []).decode() == t.token


async def test_n_answers_come_from_one_prompt_each_seeded_in_turn(tier: SerialEngineTier) -> None:
    events, both = await run(tier, n=2, temperature=1.0, seed=11, max_tokens=6)
    assert [e.choice for e in events if isinstance(e, ChoiceDone)] == [0, 1]
    assert [c.index for c in both.choices] == [0, 1]
    _, alone = await run(tier, temperature=1.0, seed=12, max_tokens=6)
    assert both.choices[1].text == alone.text  # the second answer: seed + 1, the prompt's KV intact
    assert both.usage.prompt_tokens == alone.usage.prompt_tokens
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.usage.completion_tokens == 12


async def test_logit_bias_stop_token_ids_and_min_tokens_have_their_effect(tier: SerialEngineTier) -> None:
    _, greedy = await run(tier, logprobs=True, max_tokens=3)
    first, second = (token_id(tier, t.bytes) for t in (greedy.choices[0].logprobs or [])[:2])
    _, biased = await run(tier, max_tokens=3, logit_bias={first: -100.0})
    assert not biased.text.startswith(greedy.choices[0].logprobs[0].token)  # type: ignore[index]
    _, stopped = await run(tier, max_tokens=3, stop_token_ids=[second])
    assert (stopped.usage.completion_tokens, stopped.finish_reason) == (1, "stop")
    short = [{"role": "user", "content": "Answer with one word: is water wet?"}]
    _, free = await run(tier, messages=short, max_tokens=30)
    assert free.finish_reason == "stop"
    _, longer = await run(
        tier,
        messages=short,
        max_tokens=free.usage.completion_tokens + 3,
        min_tokens=free.usage.completion_tokens + 3,
    )
    assert longer.usage.completion_tokens == free.usage.completion_tokens + 3
    with pytest.raises(TierRejected, match="context length"):
        await run(tier, max_tokens=10_000)
