"""Legacy completions (``POST /v1/completions``) end to end with the official client, on the edge
(llama.cpp) and on the cloud (a real local vLLM, marked ``cloud``): the prompt is continued raw (no chat
template: its token count is the tokenizer's count of the text alone), plain and streamed answers,
echo, logprobs, stop, max_tokens, a list of prompts, what is refused; every answer and chunk is checked
against OpenAI's schema."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.conftest import Gateway
from tests.openai_schema import COMPLETION, validate

FRESH = {"Cache-Control": "no-cache"}  # from the tier itself, not a cache replay
PROMPT = "The capital of France is"


def _tokens(model_dir: Path, text: str) -> int:
    from tokenizers import Tokenizer

    return len(Tokenizer.from_file(str(model_dir / "tokenizer.json")).encode(text).ids)


def edge_tokens(text: str) -> int:
    """SmolLM2's count (its ONNX export's tokenizer.json: the GGUF's vocabulary)."""
    root = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
    return _tokens(root / "models" / "smollm2-135m-onnx", text)


def cloud_tokens(text: str) -> int:
    from gateway.settings import load_settings

    return _tokens(Path(load_settings().local_vllm().model_dir), text)


def stream_raw(gw: Gateway, **body: Any) -> list[dict[str, Any]]:
    """The chunks of a streamed answer (each checked against OpenAI's schema), which ends in [DONE].
    OpenAI's API sends ``finish_reason: null`` until a choice ends, which its published schema (a
    string) leaves out: that alone is allowed."""
    request = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "stream": True, **body}
    headers = {**gw.auth, **FRESH}
    with httpx.stream("POST", f"{gw.url}/v1/completions", json=request, headers=headers, timeout=120) as resp:
        assert resp.status_code == 200, resp.read()
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]", lines[-3:]
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    for chunk in chunks:
        choices = [{**c, "finish_reason": c["finish_reason"] or "stop"} for c in chunk["choices"]]
        validate(COMPLETION, {**chunk, "choices": choices})
    return chunks


def text_of(chunks: list[dict[str, Any]], index: int = 0) -> str:
    return "".join(c["text"] for chunk in chunks for c in chunk["choices"] if c["index"] == index)


# -- the edge ------------------------------------------------------------------------------------


def test_a_completion_on_the_edge_continues_the_raw_prompt(gateway: Gateway) -> None:
    raw = gateway.client().completions.with_raw_response.create(
        model="edge", prompt=PROMPT, max_tokens=8, temperature=0, extra_headers=FRESH
    )
    completion = raw.parse()
    validate(COMPLETION, json.loads(raw.text))
    assert raw.headers["x-tiergate-tier"] == "edge"
    assert raw.headers["x-tiergate-route-reason"] == "edge: pinned by model name"
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    assert completion.model == "edge-smollm2-135m"
    (choice,) = completion.choices
    assert choice.index == 0 and choice.text.strip() and choice.logprobs is None
    assert choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens == edge_tokens(PROMPT) == 5  # no chat template
    assert 0 < usage.completion_tokens <= 8


def test_the_default_max_tokens_is_sixteen(gateway: Gateway) -> None:
    completion = gateway.client().completions.create(
        model="edge", prompt="Once upon a time", temperature=0, extra_headers=FRESH
    )
    assert completion.usage is not None and completion.usage.completion_tokens <= 16
    cut = gateway.client().completions.create(
        model="edge", prompt="Once upon a time", max_tokens=3, temperature=0, extra_headers=FRESH
    )
    assert cut.choices[0].finish_reason == "length" and cut.usage is not None
    assert cut.usage.completion_tokens == 3


def test_a_streamed_completion_is_the_json_one_in_pieces(gateway: Gateway) -> None:
    client = gateway.client()
    whole = client.completions.create(
        model="edge", prompt=PROMPT, max_tokens=8, temperature=0, extra_headers=FRESH
    )
    streamed = list(
        client.completions.create(
            model="edge",
            prompt=PROMPT,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=FRESH,
        )
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == whole.choices[0].text
    usage, expected = streamed[-1].usage, whole.usage
    assert streamed[-1].choices == [] and usage is not None and expected is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        expected.prompt_tokens,
        expected.completion_tokens,
    )
    chunks = stream_raw(gateway, model="edge", stream_options={"include_usage": True})
    assert text_of(chunks) == whole.choices[0].text
    assert all(c["object"] == "text_completion" for c in chunks)


def test_echo_logprobs_and_stop_on_the_edge(gateway: Gateway) -> None:
    client = gateway.client()
    echoed = client.completions.create(
        model="edge", prompt=PROMPT, max_tokens=4, temperature=0, echo=True, extra_headers=FRESH
    )
    assert echoed.choices[0].text.startswith(PROMPT) and len(echoed.choices[0].text) > len(PROMPT)
    raw = client.completions.with_raw_response.create(
        model="edge", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2, extra_headers=FRESH
    )
    validate(COMPLETION, json.loads(raw.text))
    scored = raw.parse()
    logprobs = scored.choices[0].logprobs
    assert logprobs is not None and scored.usage is not None
    assert len(logprobs.tokens or []) == len(logprobs.token_logprobs or []) == scored.usage.completion_tokens
    assert all(len(top) == 2 for top in logprobs.top_logprobs or [])
    assert all(lp <= 0 for lp in logprobs.token_logprobs or [])
    offsets = logprobs.text_offset or []
    assert offsets[0] == 0 and offsets == sorted(offsets)
    first_word = scored.choices[0].text.split()[0]
    stopped = client.completions.create(
        model="edge", prompt=PROMPT, max_tokens=6, temperature=0, stop=[first_word], extra_headers=FRESH
    )
    assert first_word not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"


def test_a_list_of_prompts_gets_a_choice_each_in_order(gateway: Gateway) -> None:
    prompts = [PROMPT, "One, two, three,"]
    completion = gateway.client().completions.create(
        model="edge", prompt=prompts, max_tokens=4, temperature=0, n=2, extra_headers=FRESH
    )
    assert [c.index for c in completion.choices] == [0, 1, 2, 3]
    alone = gateway.client().completions.create(
        model="edge", prompt=prompts[1], max_tokens=4, temperature=0, extra_headers=FRESH
    )
    assert completion.choices[2].text == completion.choices[3].text == alone.choices[0].text
    usage = completion.usage  # each prompt counted once, however many choices it has
    assert usage is not None and usage.prompt_tokens == edge_tokens(PROMPT) + edge_tokens(prompts[1])
    chunks = stream_raw(gateway, model="edge", prompt=prompts, max_tokens=4)
    assert text_of(chunks, 1) == alone.choices[0].text
    finished = [c["index"] for chunk in chunks for c in chunk["choices"] if c["finish_reason"]]
    assert finished == [0, 1]


def test_auto_routes_completions_and_repeats_come_from_the_cache(gateway: Gateway) -> None:
    client = gateway.client()
    body: dict[str, Any] = {
        "model": "tiergate-auto",
        "prompt": "Roses are red,",
        "max_tokens": 5,
        "temperature": 0,
    }
    first = client.completions.with_raw_response.create(**body)
    again = client.completions.with_raw_response.create(**body)
    assert first.headers["x-tiergate-tier"] in ("edge", "cloud")
    assert again.headers["x-tiergate-cache"] == "hit"
    assert again.parse().choices[0].text == first.parse().choices[0].text


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"suffix": " and that is all."}, "suffix"),
        ({"echo": True, "logprobs": 1}, "logprobs"),
        ({"best_of": 2}, "best_of"),
        ({"prompt": [1, 2, 3]}, "prompt"),
    ],
)
def test_what_no_tier_can_do_is_a_400_naming_it(gateway: Gateway, extra: dict[str, Any], param: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        gateway.client().completions.create(model="edge", **{"prompt": PROMPT, "max_tokens": 4, **extra})
    assert refused.value.status_code == 400
    assert refused.value.body["param"] == param  # type: ignore[index]
    assert refused.value.body["code"] == "unsupported_parameter"  # type: ignore[index]


def test_an_unknown_field_is_a_400_naming_it(gateway: Gateway) -> None:
    resp = httpx.post(
        f"{gateway.url}/v1/completions",
        json={"model": "edge", "prompt": PROMPT, "messages": []},
        headers=gateway.auth,
        timeout=30,
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["message"] == "Unrecognized request argument supplied: messages"
    assert (
        httpx.post(f"{gateway.url}/v1/completions", json={"model": "edge", "prompt": PROMPT}).status_code
        == 401
    )


# -- the cloud -----------------------------------------------------------------------------------


@pytest.mark.cloud
def test_a_completion_on_the_cloud_sends_the_prompt_raw(cloud_gateway: Gateway) -> None:
    raw = cloud_gateway.client().completions.with_raw_response.create(
        model="cloud", prompt=PROMPT, max_tokens=8, temperature=0, extra_headers=FRESH
    )
    validate(COMPLETION, json.loads(raw.text))
    completion = raw.parse()
    assert raw.headers["x-tiergate-tier"] == "cloud"
    assert completion.model == "cloud-smolvlm-135m" and completion.choices[0].text.strip()
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens == cloud_tokens(PROMPT)  # vLLM's count: no template
    assert 0 < usage.completion_tokens <= 8


@pytest.mark.cloud
def test_cloud_stream_logprobs_echo_and_prompts(cloud_gateway: Gateway) -> None:
    client = cloud_gateway.client()
    whole = client.completions.create(
        model="cloud", prompt=PROMPT, max_tokens=8, temperature=0, extra_headers=FRESH
    )
    chunks = stream_raw(cloud_gateway, model="cloud", stream_options={"include_usage": True})
    assert text_of(chunks) == whole.choices[0].text
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == cloud_tokens(PROMPT)
    raw = client.completions.with_raw_response.create(
        model="cloud", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2, extra_headers=FRESH
    )
    validate(COMPLETION, json.loads(raw.text))
    logprobs = raw.parse().choices[0].logprobs
    assert (
        logprobs is not None
        and logprobs.tokens
        and len(logprobs.tokens) == len(logprobs.token_logprobs or [])
    )
    assert "".join(logprobs.tokens) == raw.parse().choices[0].text
    assert all(1 <= len(top) <= 3 for top in logprobs.top_logprobs or [])  # vLLM adds the sampled token
    echoed = client.completions.create(
        model="cloud", prompt=PROMPT, max_tokens=8, temperature=0, echo=True, extra_headers=FRESH
    )
    assert echoed.choices[0].text == PROMPT + whole.choices[0].text
    listed = client.completions.create(
        model="cloud", prompt=[PROMPT, "One, two, three,"], max_tokens=8, temperature=0, extra_headers=FRESH
    )
    assert [c.index for c in listed.choices] == [0, 1] and listed.choices[0].text == whole.choices[0].text
