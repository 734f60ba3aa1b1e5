"""The result cache through real gateways and the official client: hit, miss, bypass, streaming
replay, and the Redis backend shared by two gateways."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.conftest import Gateway, start_gateway
from tests.redis_server import RedisServer

EDGE_ONLY = "[cloud]\nenabled = false\n"


def ask(gw: Gateway, content: str, headers: dict[str, str] | None = None, **kw: Any) -> Any:
    params: dict[str, Any] = {"temperature": 0, "max_tokens": 12, **kw}
    return gw.client().chat.completions.with_raw_response.create(
        model="tiergate-auto",
        messages=[{"role": "user", "content": content}],
        extra_headers=headers or {},
        **params,
    )


def stream_text(raw: Any) -> tuple[list[str], Any]:
    pieces, usage = [], None
    for chunk in raw.parse():
        pieces.extend(c.delta.content for c in chunk.choices if c.delta.content)
        usage = chunk.usage or usage
    return pieces, usage


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("cache"), EDGE_ONLY)
    yield gw
    gw.stop()


def test_a_repeat_is_a_hit_with_the_same_answer(edge: Gateway) -> None:
    first = ask(edge, "Name a colour.")
    again = ask(edge, "Name a colour.")
    assert first.headers["x-tiergate-cache"] == "miss"
    assert again.headers["x-tiergate-cache"] == "hit"
    assert again.headers["x-tiergate-route-reason"] == "cache hit"
    assert again.headers["x-tiergate-tier"] == "edge"
    a, b = first.parse(), again.parse()
    assert b.choices[0].message.content == a.choices[0].message.content
    assert b.usage.completion_tokens == a.usage.completion_tokens
    assert b.id != a.id  # a new completion, each with its own request id
    assert "cache;dur=" in again.headers["server-timing"]


def test_different_params_miss(edge: Gateway) -> None:
    ask(edge, "Name a fruit.")
    assert ask(edge, "Name a fruit.", max_tokens=13).headers["x-tiergate-cache"] == "miss"
    assert ask(edge, "Name a fruit.", seed=7).headers["x-tiergate-cache"] == "miss"


def test_no_cache_header_and_non_deterministic_requests_bypass(edge: Gateway) -> None:
    ask(edge, "Name an animal.")
    assert ask(edge, "Name an animal.", {"Cache-Control": "no-cache"}).headers["x-tiergate-cache"] == "bypass"
    sampled = edge.client().chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=[{"role": "user", "content": "Name an animal."}], max_tokens=12
    )
    assert sampled.headers["x-tiergate-cache"] == "bypass"  # temperature defaults to 1, no seed
    seeded = ask(edge, "Name an animal.", temperature=0.8, seed=3)
    assert seeded.headers["x-tiergate-cache"] == "miss"
    assert ask(edge, "Name an animal.", temperature=0.8, seed=3).headers["x-tiergate-cache"] == "hit"


def test_streamed_answer_replays_as_the_same_pieces_and_serves_plain_requests(edge: Gateway) -> None:
    options = {"stream": True, "stream_options": {"include_usage": True}}
    first = ask(edge, "Count to three.", **options)
    assert first.headers["x-tiergate-cache"] == "miss"
    pieces, usage = stream_text(first)
    again = ask(edge, "Count to three.", **options)
    assert again.headers["x-tiergate-cache"] == "hit"
    assert again.headers["content-type"].startswith("text/event-stream")
    replayed, replay_usage = stream_text(again)
    assert replayed == pieces and len(pieces) > 1
    assert replay_usage.completion_tokens == usage.completion_tokens
    plain = ask(edge, "Count to three.")
    assert plain.headers["x-tiergate-cache"] == "hit"
    assert plain.parse().choices[0].message.content == "".join(pieces)


def test_a_plain_answer_replays_as_a_stream(edge: Gateway) -> None:
    text = ask(edge, "Say yes.").parse().choices[0].message.content
    raw = ask(edge, "Say yes.", stream=True)
    assert raw.headers["x-tiergate-cache"] == "hit"
    assert "".join(stream_text(raw)[0]) == text


def test_cache_metrics_count_each_result(edge: Gateway) -> None:
    import httpx

    text = httpx.get(f"{edge.url}/metrics").text
    for result in ("hit", "miss", "bypass"):
        assert f'tiergate_cache_requests_total{{result="{result}"}}' in text


def test_redis_backend_is_shared_by_two_gateways(tmp_path: Path, redis_server: RedisServer) -> None:
    config = f'{EDGE_ONLY}[cache]\nbackend = "redis"\nredis_url = "{redis_server.url}"\n'
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = start_gateway(tmp_path / "one", config)
    two = start_gateway(tmp_path / "two", config)
    try:
        first = ask(one, "Name a planet.")
        assert first.headers["x-tiergate-cache"] == "miss"
        again = ask(two, "Name a planet.", stream=True)
        assert again.headers["x-tiergate-cache"] == "hit"
        assert "".join(stream_text(again)[0]) == first.parse().choices[0].message.content
    finally:
        one.stop()
        two.stop()


def test_a_dead_redis_is_a_miss_not_an_error(tmp_path: Path) -> None:
    from tests.conftest import free_port

    config = f'{EDGE_ONLY}[cache]\nbackend = "redis"\nredis_url = "redis://127.0.0.1:{free_port()}/0"\n'
    gw = start_gateway(tmp_path, config)
    try:
        raw = ask(gw, "Name a planet.")
        assert raw.headers["x-tiergate-cache"] == "miss"
        assert raw.parse().choices[0].message.content
    finally:
        gw.stop()


def test_unknown_model_is_still_404_with_cache_on(edge: Gateway) -> None:
    with pytest.raises(openai.NotFoundError):
        edge.client().chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}], temperature=0
        )
