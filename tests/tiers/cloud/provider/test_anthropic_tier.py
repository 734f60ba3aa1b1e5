"""A provider tier of protocol ``anthropic`` against the Anthropic stand-in, over TLS with a test CA:
answers (JSON and streamed, tools, images, stop sequences, cache usage) and what each fault becomes
(the errors the gateway fails over on, or ends the answer with)."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.standins.anthropic_provider import KEY, AnthropicStandIn
from tiers import (
    Completion,
    Finished,
    Generation,
    KeyRefused,
    Started,
    TextDelta,
    TierFailed,
    TierOverloaded,
    TierRejected,
    TierTimeout,
    TierUnavailable,
    collect,
)
from tiers.cloud.provider import ProviderConfig, ProviderTier, ProviderTimeouts

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnthropicStandIn]:
    with AnthropicStandIn(tmp_path_factory.mktemp("anthropic")) as server:
        yield server


def _tier(standin: AnthropicStandIn, key: str = KEY, **fields: Any) -> ProviderTier:
    config = ProviderConfig(
        protocol="anthropic",
        base_url=standin.url,
        model="claude-standin",
        api_key_env="STANDIN_KEY",
        ca_file=str(standin.ca_file),
        timeouts=ProviderTimeouts(connect_s=2, first_byte_s=0.5),
        **fields,
    )
    return ProviderTier("claude", config, environ={"STANDIN_KEY": key})


async def _run(tier: ProviderTier, gen: Generation) -> tuple[Completion, list[Any]]:
    await tier.start()
    try:
        events = [e async for e in tier.generate(gen)]
        return await collect(_replay(events)), events
    finally:
        await tier.aclose()


async def _replay(events: list[Any]) -> Any:
    for event in events:
        yield event


def run(tier: ProviderTier, gen: Generation) -> tuple[Completion, list[Any]]:
    return asyncio.run(_run(tier, gen))


@pytest.fixture(autouse=True)
def _clean(standin: AnthropicStandIn) -> Iterator[None]:
    standin.fail("", 0)
    standin.requests.clear()
    standin.refused.clear()
    yield
    assert standin.refused in ([], ["key"])  # every body the tier sent was one Anthropic takes


@pytest.mark.parametrize("stream", [False, True])
def test_answers_json_and_streamed(standin: AnthropicStandIn, stream: bool) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    gen = Generation(
        messages=[
            {"role": "system", "content": "Be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, image]},
        ],
        stream=stream,
    )
    answer, events = run(_tier(standin), gen)
    assert isinstance(events[0], Started) and events[0].model == "claude-standin"
    assert answer.text == "Hello from the stand-in: 1 turns, 1 images, done."
    assert answer.finish_reason == "stop" and answer.usage.prompt_tokens > 0 < answer.usage.completion_tokens
    sent = standin.requests[-1]
    assert sent["system"] == [{"type": "text", "text": "Be brief"}] and sent.get("stream", False) is stream
    assert sum(isinstance(e, TextDelta) for e in events) == (len(answer.text.split(" ")) if stream else 1)


@pytest.mark.parametrize("stream", [False, True])
def test_tools_and_stop_sequences(standin: AnthropicStandIn, stream: bool) -> None:
    ask = [{"role": "user", "content": "weather in Oslo?"}]
    answer, _ = run(
        _tier(standin), Generation(messages=ask, tools=[WEATHER], tool_choice="required", stream=stream)
    )
    call = answer.choices[0].tool_calls[0]
    assert (call.id, call.name, answer.finish_reason) == ("toolu_standin01", "weather", "tool_calls")
    assert json.loads(call.arguments) == {"city": "Paris"}
    turn = [
        *ask,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "snow"},
    ]
    answer, events = run(
        _tier(standin), Generation(messages=turn, tools=[WEATHER], stop=["snow"], stream=stream)
    )
    assert answer.text == 'Hello from the stand-in: the tool said "' and answer.finish_reason == "stop"
    assert events[-1].stop == "snow"  # Anthropic names the sequence: /v1/messages gives it back


@pytest.mark.parametrize("stream", [False, True])
def test_cache_tokens_are_reported(standin: AnthropicStandIn, stream: bool) -> None:
    gen = Generation(
        messages=[{"role": "system", "content": f"Rules {stream}" * 50}, {"role": "user", "content": "hi"}],
        stream=stream,
    )
    tier = _tier(standin, cache_prefix=True)
    first, _ = run(tier, gen)
    second, _ = run(tier, gen)
    reported = standin.usages[-2:]
    assert first.usage.cache_write_tokens == reported[0]["cache_creation_input_tokens"] > 0
    assert second.usage.cached_tokens == reported[1]["cache_read_input_tokens"] > 0
    assert second.usage.prompt_tokens == reported[1]["input_tokens"] + reported[1]["cache_read_input_tokens"]


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("429", TierOverloaded),
        ("529", TierUnavailable),
        ("500", TierUnavailable),
        ("stall", TierTimeout),
        ("400", TierRejected),
        ("401", KeyRefused),
    ],
)
def test_faults_before_the_first_byte(standin: AnthropicStandIn, fault: str, error: type[Exception]) -> None:
    standin.fail(fault)
    standin.stall_s = 2.0
    tier = _tier(standin)
    with pytest.raises(error) as raised:
        run(tier, Generation(messages=[{"role": "user", "content": "hi"}]))
    assert type(raised.value) is error
    if fault == "429":
        assert raised.value.retry_after_s == 7  # type: ignore[attr-defined]
    # a refused key takes the tier down, and so does a 429's "0 requests left"; a 400 (the client's), a
    # 5xx or a stall leave it ready
    assert (tier.state().health.value == "down") is (fault in ("401", "429"))


def test_an_error_event_mid_stream_ends_the_answer(standin: AnthropicStandIn) -> None:
    standin.fail("midstream")
    seen: list[Any] = []

    async def go() -> None:
        tier = _tier(standin)
        await tier.start()
        try:
            async for event in tier.generate(
                Generation(messages=[{"role": "user", "content": "hi"}], stream=True)
            ):
                seen.append(event)
        finally:
            await tier.aclose()

    with pytest.raises(TierFailed, match="overloaded_error"):
        asyncio.run(go())
    assert isinstance(seen[0], Started) and [type(e) for e in seen[1:]] == [TextDelta, TextDelta]
    assert not any(isinstance(e, Finished) for e in seen)


def test_a_wrong_key_is_refused_by_the_standin(standin: AnthropicStandIn) -> None:
    tier = _tier(standin, key="sk-wrong")
    with pytest.raises(KeyRefused, match="api_key_env"):
        run(tier, Generation(messages=[{"role": "user", "content": "hi"}]))
    assert standin.refused[-1] == "key"


def test_headroom_is_kept(standin: AnthropicStandIn) -> None:
    standin.remaining = (0, 10)
    tier = _tier(standin)
    try:
        run(tier, Generation(messages=[{"role": "user", "content": "hi"}]))
        state = tier.state()
        assert state.provider["headroom"] == {"requests": 0, "tokens": 10}
        assert state.health.value == "down" and "rate limit" in state.detail  # steered away before a 429
    finally:
        standin.remaining = (1000, 400_000)


def test_the_standin_refuses_what_anthropic_refuses(standin: AnthropicStandIn) -> None:
    """Its checks are live: a field no SDK type has, a block of no type, a missing version header."""
    url = f"{standin.url}/v1/messages"
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    good = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    bad = [
        ({**good, "logprobs": True}, headers, "logprobs: Extra inputs are not permitted"),
        ({**good, "messages": [{"role": "user", "content": [{"type": "text"}]}]}, headers, "invalid request"),
        ({**good, "temperature": 1.5}, headers, "temperature: out of range"),
        (good, {"x-api-key": KEY}, "anthropic-version"),
    ]
    with httpx.Client(verify=ssl.create_default_context(cafile=str(standin.ca_file))) as client:
        for body, sent_headers, said in bad:
            resp = client.post(url, json=body, headers=sent_headers)
            assert resp.status_code == 400 and resp.json()["error"]["type"] == "invalid_request_error"
            assert said in resp.json()["error"]["message"]
        assert client.post(url, json=good, headers=headers).status_code == 200
    standin.refused.clear()
