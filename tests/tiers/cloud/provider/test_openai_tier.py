"""The provider tier on OpenAI's and Azure's protocol, against the TLS stand-in (tests/standins/): every
body it sends passes the SDK's parameter types and OpenAI's OpenAPI schema, its answers (JSON and
streamed, text, tools, logprobs, n) read back as events, and each fault maps to the error that lets the
gateway fail over (429, 5xx, stall), ends the answer (mid-stream), is the client's (400), or takes the
tier down (401)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tests.standins.openai_provider import OpenAIStandIn
from tests.standins.tls import H2ServerThread, ServerThread, TestCA
from tiers import (
    Finished,
    Generation,
    Health,
    KeyRefused,
    OutputRefused,
    Started,
    TierFailed,
    TierOverloaded,
    TierRejected,
    TierTimeout,
    TierUnavailable,
    collect,
)
from tiers.cloud.provider import Headroom, ProviderConfig, ProviderTier, dialect_for

KEY = "sk-standin-tier-0123456789"
HELLO = [{"role": "user", "content": "hello there provider"}]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA.make(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def standin(ca: TestCA) -> Iterator[tuple[OpenAIStandIn, str]]:
    app = OpenAIStandIn(KEY, cached_tokens=4, stall_s=3.0)
    server = ServerThread(app, ca).start()
    yield app, server.url
    server.stop()


@pytest.fixture
def app(standin: tuple[OpenAIStandIn, str]) -> Iterator[OpenAIStandIn]:
    standin[0].clear()
    yield standin[0]
    assert standin[0].invalid == []  # every body the tier sent was one OpenAI takes


def config(url: str, ca: TestCA, **over: object) -> ProviderConfig:
    raw = {
        "base_url": f"{url}/v1",
        "model": "gpt-test",
        "api_key_env": "STANDIN_KEY",
        "ca_file": str(ca.ca_file),
        "timeouts": {"connect_s": 2, "first_byte_s": 1.0, "total_s": 30},
        **over,
    }
    return msgspec.convert(raw, ProviderConfig)


async def started(cfg: ProviderConfig, environ: dict[str, str] | None = None) -> ProviderTier:
    tier = ProviderTier("gpt", cfg, {"STANDIN_KEY": KEY} if environ is None else environ)
    await tier.start()
    return tier


async def test_a_json_answer_reads_back_with_its_usage_and_cached_tokens(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca, organization="org-1", project="proj-1"))
    gen = Generation(
        messages=HELLO, max_tokens=20, temperature=0.2, seed=3, stop=["zz"], prompt_cache_key="c1"
    )
    answer = await collect(tier.generate(gen))
    await tier.aclose()
    assert answer.text == "Echo: hello there provider"
    assert answer.usage.cached_tokens == 4
    assert answer.usage.prompt_tokens == app.usages[0].prompt_tokens
    sent = app.requests[0]
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["openai-organization"] == "org-1" and sent.headers["openai-project"] == "proj-1"
    assert sent.body["prompt_cache_key"] == "c1" and sent.body["max_tokens"] == 20 and sent.body["seed"] == 3


async def test_a_stream_reads_back_tools_logprobs_and_choices(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca))
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    called = await collect(tier.generate(Generation(messages=HELLO, tools=tools, stream=True)))
    assert called.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in called.choices[0].tool_calls] == [
        ("call_standin0", "weather", '{"city": "stand-in"}')
    ]
    scored = await collect(
        tier.generate(Generation(messages=HELLO, logprobs=True, top_logprobs=1, n=2, stream=True))
    )
    await tier.aclose()
    assert [c.text for c in scored.choices] == ["Echo: hello there provider"] * 2
    assert [t.token for t in scored.choices[0].logprobs or []] == ["Echo:", "hello", "there", "provider"]
    assert scored.usage.completion_tokens == 8 and scored.usage.cached_tokens == 4
    assert app.requests[-1].body["stream_options"] == {"include_usage": True}


async def test_azure_sends_the_deployment_path_the_api_version_and_the_api_key_header(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    cfg = config(
        standin[1], ca, protocol="azure", base_url=standin[1], model="my-dep", api_version="2024-10-21"
    )
    tier = await started(cfg)
    answer = await collect(tier.generate(Generation(messages=HELLO, max_tokens=2)))
    await tier.aclose()
    assert answer.text == "Echo: hello" and answer.finish_reason == "length"
    sent = app.requests[0]
    assert sent.path == "/openai/deployments/my-dep/chat/completions"
    assert sent.headers["api-key"] == KEY and "authorization" not in sent.headers
    assert "model" not in sent.body and sent.body["max_completion_tokens"] == 2


async def test_a_legacy_prompt_goes_as_one_user_turn(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca))
    gen = Generation(messages=[{"role": "user", "content": "once upon"}], prompt="once upon")
    answer = await collect(tier.generate(gen))
    await tier.aclose()
    assert answer.text == "Echo: once upon"
    assert app.requests[0].body["messages"] == [{"role": "user", "content": "once upon"}]


async def test_what_openai_has_no_field_for_is_refused_not_dropped(
    standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca))
    with pytest.raises(TierRejected) as refused:
        await collect(tier.generate(Generation(messages=HELLO, top_k=5)))
    await tier.aclose()
    assert refused.value.param == "top_k"


@pytest.mark.parametrize(
    ("fault", "error"),
    [("429", TierOverloaded), ("500", TierUnavailable), ("stall", TierTimeout)],
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_a_fault_before_the_first_byte_lets_the_plan_move_on(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA, fault: str, error: type, stream: bool
) -> None:
    tier = await started(config(standin[1], ca))
    app.fail(fault)
    events = tier.generate(Generation(messages=HELLO, stream=stream))
    with pytest.raises(error) as raised:
        await anext(events)  # nothing began: the gateway may try the next tier
    if fault == "429":
        assert raised.value.retry_after_s == 3.0 and "429" in raised.value.message
        state = tier.state()  # the headroom said none is left: steered away until it refills
        assert state.health is Health.DOWN and state.provider["headroom"]["requests"] == 0
    else:
        assert tier.state().health is Health.READY
    await tier.aclose()


async def test_an_error_mid_stream_ends_the_answer_after_it_began(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca))
    app.fail("midstream")
    events = tier.generate(Generation(messages=HELLO, stream=True))
    assert isinstance(await anext(events), Started)
    with pytest.raises(TierFailed, match="mid-answer"):
        async for event in events:
            assert not isinstance(event, Finished)
    await tier.aclose()


async def test_a_400_is_the_clients_with_the_providers_code_and_the_tier_stays_ready(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca))
    app.fail("400")
    with pytest.raises(TierRejected) as rejected:
        await collect(tier.generate(Generation(messages=HELLO)))
    assert (rejected.value.code, rejected.value.param) == ("context_length_exceeded", "messages")
    assert "maximum context length" in rejected.value.message
    assert tier.state().health is Health.READY
    await tier.aclose()


async def test_a_refused_key_takes_the_tier_down_saying_what_to_fix_and_never_the_key(
    standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca), {"STANDIN_KEY": "sk-wrong-key-987"})
    with pytest.raises(KeyRefused):
        await collect(tier.generate(Generation(messages=HELLO)))
    state = tier.state()
    assert state.health is Health.DOWN and "api_key_env" in state.detail
    assert "invalid_api_key" in state.detail
    assert "sk-wrong" not in repr(state.as_dict()) and "-987" not in repr(state.as_dict())
    with pytest.raises(TierUnavailable, match="refused the key"):  # not retried: down, no call made
        await collect(tier.generate(Generation(messages=HELLO)))
    await tier.aclose()


async def test_a_missing_key_is_said_by_its_source_and_the_tier_is_down(
    standin: tuple[OpenAIStandIn, str], ca: TestCA, tmp_path: Path
) -> None:
    tier = await started(config(standin[1], ca), {})
    assert tier.state().health is Health.DOWN and tier.state().provider["key_set"] is False
    assert "STANDIN_KEY" in tier.state().detail
    keyfile = tmp_path / "key"
    keyfile.write_text(KEY + "\n")
    cfg = config(standin[1], ca, api_key_env="", api_key_file=str(keyfile))
    from_file = await started(cfg, {})
    assert (await collect(from_file.generate(Generation(messages=HELLO)))).text.startswith("Echo:")
    await tier.aclose()
    await from_file.aclose()


async def test_the_certificate_is_verified_against_the_system_cas_without_ca_file(
    standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca, ca_file=""))
    with pytest.raises(TierUnavailable, match="cannot reach"):
        await collect(tier.generate(Generation(messages=HELLO)))
    await tier.aclose()


async def test_https_proxy_from_the_environment_is_honoured(
    standin: tuple[OpenAIStandIn, str], ca: TestCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # nothing listens: the call must try it
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    tier = await started(config(standin[1], ca))
    with pytest.raises(TierUnavailable, match=r"ProxyError|ConnectError"):
        await collect(tier.generate(Generation(messages=HELLO)))
    await tier.aclose()


async def test_http2_where_the_provider_offers_it_with_calls_sharing_one_connection(ca: TestCA) -> None:
    app = OpenAIStandIn(KEY)
    server = H2ServerThread(app, ca).start()
    try:
        tier = await started(config(server.url, ca))
        first = await collect(tier.generate(Generation(messages=HELLO)))  # the connection; then 4 at once
        answers = [
            first,
            *await asyncio.gather(*(collect(tier.generate(Generation(messages=HELLO))) for _ in range(4))),
        ]
        streamed = await collect(tier.generate(Generation(messages=HELLO, stream=True)))
        await tier.aclose()
    finally:
        server.stop()
    assert [a.text for a in [*answers, streamed]] == ["Echo: hello there provider"] * 6
    assert {r.http_version for r in app.requests} == {"2"}
    assert len({r.client for r in app.requests}) == 1  # multiplexed on one connection
    assert app.invalid == []


async def test_http11_streams_one_after_another_reuse_one_connection(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    """A stream's body is read to its end after ``[DONE]``, so the connection goes back to the pool
    (left unread, httpx closes it and each stream pays a new TLS handshake)."""
    tier = await started(config(standin[1], ca))
    streamed = [await collect(tier.generate(Generation(messages=HELLO, stream=True))) for _ in range(3)]
    await tier.aclose()
    assert [a.text for a in streamed] == ["Echo: hello there provider"] * 3
    assert {r.http_version for r in app.requests} == {"1.1"}
    assert len({r.client for r in app.requests}) == 1


async def test_an_unreadable_ca_file_takes_the_tier_down_saying_so(
    standin: tuple[OpenAIStandIn, str], ca: TestCA, tmp_path: Path
) -> None:
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("not a certificate")
    tier = await started(config(standin[1], ca, ca_file=str(bad)))
    state = tier.state()
    assert state.health is Health.DOWN and "cannot use ca_file" in state.detail
    with pytest.raises(TierUnavailable, match="ca_file"):
        await collect(tier.generate(Generation(messages=HELLO)))
    await tier.aclose()


async def test_a_429s_retry_after_alone_keeps_calls_away_until_it_passes(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    tier = await started(config(standin[1], ca))
    app.fail("429bare")
    with pytest.raises(TierOverloaded):
        await collect(tier.generate(Generation(messages=HELLO)))
    state = tier.state()
    assert state.health is Health.DOWN and "retry after 2 s" in state.detail
    with pytest.raises(TierUnavailable, match="rate limited"):  # not called: one request reached it
        await collect(tier.generate(Generation(messages=HELLO)))
    assert len(app.requests) == 1
    await tier.aclose()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
async def test_an_answer_that_breaks_the_requests_format_is_refused_not_passed_on(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA, stream: bool
) -> None:
    tier = await started(config(standin[1], ca))
    app.fail("garbled")
    gen = Generation(messages=HELLO, response_format={"type": "json_object"}, stream=stream)
    events = tier.generate(gen)
    if stream:  # the pieces went on; the end is refused, so no Finished says it was whole
        assert isinstance(await anext(events), Started)
    with pytest.raises(OutputRefused, match="not valid JSON"):
        async for event in events:
            assert not isinstance(event, Finished)
    await tier.aclose()


async def test_total_s_bounds_a_call_whose_first_byte_is_within_its_own_deadline(
    app: OpenAIStandIn, standin: tuple[OpenAIStandIn, str], ca: TestCA
) -> None:
    timeouts = {"connect_s": 2, "first_byte_s": 10.0, "total_s": 0.5}
    tier = await started(config(standin[1], ca, timeouts=timeouts))
    app.fail("stall")
    started_at = time.monotonic()
    with pytest.raises(TierTimeout):
        await collect(tier.generate(Generation(messages=HELLO)))
    assert time.monotonic() - started_at < 2.0
    await tier.aclose()


def test_headroom_is_used_up_by_the_calls_in_flight_and_read_from_openais_headers() -> None:
    assert Headroom(requests=0).exhausted() and Headroom(tokens=0).exhausted()
    assert Headroom(requests=2).exhausted(in_flight=2) and not Headroom(requests=3).exhausted(in_flight=2)
    assert not Headroom().exhausted(in_flight=5)  # nothing said: nothing known to be used up
    cfg = msgspec.convert({"base_url": "https://api.openai.com/v1", "model": "m"}, ProviderConfig)
    headers = {
        "x-ratelimit-remaining-requests": "4999",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-requests": "12ms",
        "x-ratelimit-reset-tokens": "6m0.5s",
    }
    assert dialect_for("gpt", cfg, "k").headroom(headers) == Headroom(4999, 0, 360.5)
