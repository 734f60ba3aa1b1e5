"""The edge tier on ONNX Runtime end to end: a real gateway (edge.backend = "onnx") serving the SmolLM2 export
made by `tiergate models export-onnx`, driven by the official openai client."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import Gateway, start_gateway
from tests.tiers.edge.test_onnx_engine import int8_agreement

CACHE = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
EXPORT = CACHE / "models" / "smollm2-135m-onnx"
HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
ESSAY = [{"role": "user", "content": "Write a very long essay about the history of Rome."}]

pytestmark = pytest.mark.skipif(
    not (EXPORT / "tiergate-build.json").exists(),
    reason=f"no ONNX export at {EXPORT} (scripts/setup.sh makes it)",
)


def _onnx_gateway(tmp: Path, extra: str = "") -> Gateway:
    return start_gateway(tmp, f'[edge]\nbackend = "onnx"\n{extra}[cloud]\nenabled = false\n')


@pytest.fixture(scope="module")
def onnx_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = _onnx_gateway(tmp_path_factory.mktemp("onnx"))
    yield gw
    gw.stop()


def _edge(gw: Gateway) -> dict[str, object]:
    return next(t for t in gw.readyz()["tiers"] if t["name"] == "edge")


def test_the_edge_says_it_runs_on_onnxruntime(onnx_gw: Gateway) -> None:
    assert "onnxruntime fp32 on CPUExecutionProvider" in str(_edge(onnx_gw)["detail"])


def test_chat_answers_with_usage(onnx_gw: Gateway) -> None:
    raw = onnx_gw.client().chat.completions.with_raw_response.create(
        model="edge", messages=HELLO, max_tokens=24, temperature=0
    )
    completion = raw.parse()
    assert raw.headers["x-tiergate-tier"] == "edge"
    assert completion.model == "edge-smollm2-135m"
    assert (completion.choices[0].message.content or "").strip()
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 10 and 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_greedy_answers_equal_the_pytorch_models(onnx_gw: Gateway) -> None:
    """reference.json holds transformers' own greedy tokens (float32), recorded at export time."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(EXPORT / "tokenizer.json"))
    cases = json.loads((EXPORT / "reference.json").read_text())["prompts"]
    client = onnx_gw.client()
    for case in cases:
        expected = case["greedy_ids"]
        ended = expected[-1] == 2  # <|im_end|>: the answer finished inside the reference window
        answer = client.chat.completions.create(
            model="edge", messages=case["messages"], max_tokens=len(expected), temperature=0
        )
        assert answer.usage is not None and answer.usage.prompt_tokens == len(case["prompt_ids"])
        assert answer.choices[0].message.content == tokenizer.decode(expected, skip_special_tokens=True)
        assert answer.usage.completion_tokens == len(expected) - ended
        assert answer.choices[0].finish_reason == ("stop" if ended else "length")


def test_stream_matches_the_non_streamed_answer(onnx_gw: Gateway) -> None:
    client = onnx_gw.client()
    whole = client.chat.completions.create(model="edge", messages=HELLO, max_tokens=24, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model="edge",
            messages=HELLO,
            max_tokens=24,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == whole.choices[0].message.content
    )
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_max_tokens_and_stop(onnx_gw: Gateway) -> None:
    client = onnx_gw.client()
    capped = client.chat.completions.create(model="edge", messages=HELLO, max_tokens=3, temperature=0)
    assert capped.usage is not None and capped.usage.completion_tokens == 3
    assert capped.choices[0].finish_reason == "length"
    count = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    full = client.chat.completions.create(model="edge", messages=count, max_tokens=30, temperature=0)
    text = full.choices[0].message.content or ""
    assert "5" in text, text
    stopped = client.chat.completions.create(
        model="edge", messages=count, max_tokens=30, temperature=0, stop=["5"]
    )
    assert stopped.choices[0].message.content == text[: text.index("5")]
    assert stopped.choices[0].finish_reason == "stop"


def test_sampling_is_seeded(onnx_gw: Gateway) -> None:
    client = onnx_gw.client()
    answers = {
        seed: [
            client.chat.completions.create(
                model="edge", messages=HELLO, max_tokens=16, temperature=1.0, top_p=0.95, seed=seed
            )
            .choices[0]
            .message.content
            for _ in range(2)
        ]
        for seed in (1, 2, 3)
    }
    assert all(a == b for a, b in answers.values())
    assert len({a for a, _ in answers.values()}) > 1  # different seeds: not all the same answer


def test_a_client_that_goes_away_stops_the_generation(onnx_gw: Gateway) -> None:
    body = {"model": "edge", "messages": ESSAY, "max_tokens": 1500, "temperature": 0, "stream": True}
    with httpx.stream(
        "POST", f"{onnx_gw.url}/v1/chat/completions", json=body, headers=onnx_gw.auth, timeout=60
    ) as resp:
        lines = resp.iter_lines()
        for _ in range(3):
            next(lines)
    onnx_gw.wait(lambda: _edge(onnx_gw)["in_flight"] == 0, 10, "the edge model to be free")
    # the model answers again (had it kept writing the 1,500-token essay, this would wait for it)
    answer = onnx_gw.client().chat.completions.create(model="edge", messages=HELLO, max_tokens=2)
    assert answer.usage is not None and answer.usage.completion_tokens == 2


def test_the_int8_model_answers_or_is_refused_with_the_reason(tmp_path: Path) -> None:
    """The INT8 graph answers, unless the export's own check found it agreeing on nothing: then the edge
    says why it will not serve it (seen with this month's packages: docs/edge.md, "INT8")."""
    config = '[edge]\nbackend = "onnx"\nonnx_quantized = true\n[cloud]\nenabled = false\n'
    gw = start_gateway(tmp_path, config, edge=False)
    try:
        gw.wait(lambda: gw.tier_health("edge") != "starting", 120, "the edge tier to load")
        edge = _edge(gw)
        if int8_agreement(EXPORT) == 0:
            assert edge["health"] == "down"
            assert "INT8 graph agrees with transformers on 0/" in str(edge["detail"])
            return
        assert "onnxruntime int8" in str(edge["detail"])
        answer = gw.client().chat.completions.create(
            model="edge",
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=12,
            temperature=0,
        )
        assert "Paris" in (answer.choices[0].message.content or "")
    finally:
        gw.stop()


def test_a_missing_export_leaves_the_edge_down_with_the_fix(tmp_path: Path) -> None:
    gw = start_gateway(
        tmp_path,
        f'[edge]\nbackend = "onnx"\nonnx_model_dir = "{tmp_path / "none"}"\n[cloud]\nenabled = false\n',
        edge=False,
    )
    try:
        gw.wait(lambda: _edge(gw)["health"] == "down", 30, "the edge tier to give up")
        assert "tiergate models export-onnx" in str(_edge(gw)["detail"])
    finally:
        gw.stop()


# -- what agents and apps send, on the ONNX engine (the same constrained decoding as llama.cpp's) ------

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_a_named_tool_call_and_its_result_round_trip(onnx_gw: Gateway) -> None:
    client = onnx_gw.client()
    named = {"type": "function", "function": {"name": "get_weather"}}
    first = client.chat.completions.create(
        model="edge", messages=ASK_WEATHER, tools=[WEATHER], tool_choice=named, max_tokens=48, temperature=0
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
    history = [
        *ASK_WEATHER,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 21}'},
    ]
    answer = client.chat.completions.create(
        model="edge", messages=history, tools=[WEATHER], max_tokens=24, temperature=0
    )
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_parse_with_a_pydantic_model_and_logprobs(onnx_gw: Gateway) -> None:
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int

    client = onnx_gw.client()
    parsed = client.chat.completions.parse(
        model="edge",
        messages=[{"role": "user", "content": "Name a big city and its population."}],
        response_format=City,
        max_tokens=48,
        temperature=0,
    )
    assert isinstance(parsed.choices[0].message.parsed, City)
    scored = client.chat.completions.create(
        model="edge", messages=HELLO, max_tokens=6, temperature=0, logprobs=True, top_logprobs=3, n=2
    )
    assert len(scored.choices) == 2
    content = scored.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content and all(len(t.top_logprobs) == 3 and t.logprob <= 0 for t in content)


def test_every_structured_answer_finishes_within_its_budget_on_onnxruntime(onnx_gw: Gateway) -> None:
    """The twenty schemas of tests/structured_cases.py at temperature 0 and 0.8, as on llama.cpp."""
    from tests.integration.test_structured_termination import finish_every_case

    assert finish_every_case(onnx_gw) == []
