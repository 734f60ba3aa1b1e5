"""The parts of the hosted-provider benchmarks that can be checked in seconds: the stand-in's latency
model (seeded draws, time to first token and streaming rate as drawn, answer length cut at
max_tokens), the three-tier replay's settings (they load, price the hosted tier at its list price and
make it the counterfactual), and the TLS upstream of bench.provider_overhead (HTTP/2 by ALPN,
HTTP/1.1 for clients that offer only that)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from bench.overhead import free_port
from bench.route_replay_hosted import HOSTED, HOSTED_PRICE, KEY_ENV, gateway_config
from tests.standins.latency import LatencyModel
from tests.standins.openai_provider import OpenAIStandIn
from tests.standins.tls import ServerThread, TestCA

KEY = "sk-latency-standin-0123"
HI = [{"role": "user", "content": "Say hello to Ada."}]


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> TestCA:
    return TestCA.make(tmp_path_factory.mktemp("ca"))


def test_the_draws_are_seeded_and_near_the_stated_medians() -> None:
    model, again = (
        LatencyModel(seed=7, answer_median_tokens=300),
        LatencyModel(seed=7, answer_median_tokens=300),
    )
    draws = [model.draw() for _ in range(2000)]
    assert [again.draw() for _ in range(2000)] == draws
    ttfts = sorted(d.ttft_s for d in draws)
    assert 0.45 < ttfts[1000] < 0.55  # median 0.5 s
    rates = [1 / d.per_token_s for d in draws]
    assert min(rates) >= 60 and max(rates) <= 100
    lengths = sorted(d.tokens or 0 for d in draws)
    assert 270 < lengths[1000] < 330  # median 300 tokens
    assert LatencyModel().draw().tokens is None  # no length model: the echo's own


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="tokens_per_s"):
        LatencyModel(tokens_per_s_low=100, tokens_per_s_high=60)


@pytest.fixture(scope="module")
def slow(ca: TestCA) -> Iterator[str]:
    # Fixed draws (shapes 0): first token after 0.3 s, 50 tokens/s, answers of 400 tokens by nature.
    model = LatencyModel(
        ttft_median_s=0.3,
        ttft_sigma=0.0,
        tokens_per_s_low=50,
        tokens_per_s_high=50,
        answer_median_tokens=400,
        answer_sigma=0.0,
    )
    server = ServerThread(OpenAIStandIn(KEY, latency=model), ca).start()
    yield server.url
    server.stop()


def test_a_json_answer_takes_the_first_token_and_the_rest_at_the_rate(slow: str, ca: TestCA) -> None:
    with httpx.Client(
        verify=ssl.create_default_context(cafile=ca.ca_file), headers={"Authorization": f"Bearer {KEY}"}
    ) as client:
        client.post(f"{slow}/v1/chat/completions", json={"model": "m", "messages": HI, "max_tokens": 1})
        started = time.perf_counter()
        resp = client.post(
            f"{slow}/v1/chat/completions", json={"model": "m", "messages": HI, "max_tokens": 21}
        )
        took = time.perf_counter() - started
    answer = resp.json()
    assert answer["usage"]["completion_tokens"] == 21  # 400 by nature, cut at max_tokens
    assert answer["choices"][0]["finish_reason"] == "length"
    assert 0.3 + 20 / 50 <= took < 0.3 + 20 / 50 + 0.5


def test_a_stream_begins_after_the_first_token_and_runs_at_the_rate(slow: str, ca: TestCA) -> None:
    body = {"model": "m", "messages": HI, "max_tokens": 11, "stream": True}
    with httpx.Client(
        verify=ssl.create_default_context(cafile=ca.ca_file), headers={"Authorization": f"Bearer {KEY}"}
    ) as client:
        client.post(f"{slow}/v1/chat/completions", json={"model": "m", "messages": HI, "max_tokens": 1})
        started = time.perf_counter()
        first = None
        with client.stream("POST", f"{slow}/v1/chat/completions", json=body) as resp:
            for _ in resp.iter_bytes():
                first = first or time.perf_counter() - started
        took = time.perf_counter() - started
    assert first is not None and 0.3 <= first < 0.6
    assert 0.3 + 10 / 50 <= took < 0.3 + 10 / 50 + 0.5


def test_the_three_tier_settings_load_with_the_hosted_price_and_counterfactual(tmp_path: Path) -> None:
    from gateway.settings import Settings

    text = f'data_dir = "{tmp_path}"\n' + gateway_config("https://127.0.0.1:1/v1", tmp_path / "ca.pem")
    import tomllib

    settings = msgspec.convert(tomllib.loads(text), Settings)
    tier = settings.tiers[HOSTED]
    assert (tier.protocol, tier.model, tier.api_key_env, tier.quality) == (
        "openai",
        "gpt-4.1-mini",
        KEY_ENV,
        0.9,
    )
    assert tier.quality > settings.cloud.quality > settings.edge.quality
    assert settings.pricing.counterfactual_tier == HOSTED
    price = next(p for p in settings.pricing.prices if p.tier == HOSTED)
    assert (price.prompt_per_1k, price.cached_prompt_per_1k, price.completion_per_1k) == (
        HOSTED_PRICE["prompt_per_1k"],
        HOSTED_PRICE["cached_prompt_per_1k"],
        HOSTED_PRICE["completion_per_1k"],
    )
    assert {p.tier for p in settings.pricing.prices} >= {"edge", "cloud", HOSTED}


def test_the_tls_upstream_speaks_http2_by_alpn_and_http11_otherwise(ca: TestCA) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.upstream_tls", str(port), str(ca.cert_file), str(ca.key_file)],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
    )

    async def ask(http2: bool, stream: bool) -> httpx.Response:
        async with httpx.AsyncClient(
            verify=ssl.create_default_context(cafile=ca.ca_file), http2=http2
        ) as client:
            for _ in range(50):
                try:
                    return await client.post(
                        f"https://127.0.0.1:{port}/v1/chat/completions", json={"model": "m", "stream": stream}
                    )
                except httpx.ConnectError:
                    await asyncio.sleep(0.1)
        raise AssertionError("the upstream did not start")

    try:
        for http2, version in ((True, "HTTP/2"), (False, "HTTP/1.1")):
            plain = asyncio.run(ask(http2, False))
            assert (plain.http_version, plain.json()["object"]) == (version, "chat.completion")
            streamed = asyncio.run(ask(http2, True))
            assert streamed.text.startswith("data: ") and streamed.text.endswith("data: [DONE]\n\n")
    finally:
        proc.terminate()
        out = proc.communicate(timeout=10)[0].decode().split()
    assert out == ["h2", "h2", "http/1.1", "http/1.1"]
