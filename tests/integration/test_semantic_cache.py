"""The semantic cache through real gateways: the real edge model answers, the real MiniLM embeds, a
paraphrase gets the stored answer (header, similarity, Server-Timing, ledger, metrics); a near miss,
another tenant, another context, tool results and sampling do not; the index survives a restart; two
gateways on one real redis-server share hits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.pipeline.answers.semantic.wordnet import FOLDER
from gateway.settings import load_settings
from tests.conftest import Gateway, start_gateway
from tests.integration.test_tenants_api import admin, ledger_rows
from tests.redis_server import RedisServer

SEMANTIC_ON = "[policies.default.semantic_cache]\nenabled = true\n"
CONFIG = f"[cloud]\nenabled = false\n[ledger]\nflush_interval_s = 0.1\n{SEMANTIC_ON}"


def ask(
    gw: Gateway, content: str | list[dict[str, Any]], key: str | None = None, **kw: Any
) -> httpx.Response:
    messages = kw.pop("messages", [])
    body = {
        "model": "tiergate-auto",
        "messages": [*messages, {"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": 8,
        **kw,
    }
    headers = {"Authorization": f"Bearer {key or gw.api_key}", "X-Request-ID": uuid.uuid4().hex}
    resp = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=120)
    assert resp.status_code == 200, resp.text
    return resp


def text_of(resp: httpx.Response) -> str:
    return str(resp.json()["choices"][0]["message"]["content"])


@pytest.fixture(scope="module")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("semantic"), CONFIG)
    yield gw
    gw.stop()


def tenant_key(gw: Gateway, name: str, policy: dict[str, Any] | None = None) -> str:
    assert admin(gw, "POST", "/tenants", json={"name": name}).status_code == 201
    if policy is not None:
        assert admin(gw, "PUT", f"/tenants/{name}/policy", json=policy).status_code == 200
    return str(admin(gw, "POST", f"/tenants/{name}/keys").json()["key"])


def test_a_paraphrase_gets_the_stored_answer_marked_semantic(edge: Gateway) -> None:
    first = ask(edge, "What is the capital of France?")
    assert first.headers["x-tiergate-cache"] == "miss"
    assert "embed;dur=" in first.headers["server-timing"]  # the miss paid for the embedding too
    again = ask(edge, "Which city is the capital of France?")
    assert again.headers["x-tiergate-cache"] == "semantic"
    similarity = float(again.headers["x-tiergate-similarity"])
    assert 0.85 <= similarity < 1.0
    assert again.headers["x-tiergate-route-reason"] == f"semantic cache hit ({similarity:.3f})"
    assert "embed;dur=" in again.headers["server-timing"] and "cache;dur=" in again.headers["server-timing"]
    assert text_of(again) == text_of(first)
    assert again.json()["id"] != first.json()["id"]
    rows = ledger_rows(edge, want={again.headers["x-request-id"]})
    row = rows[again.headers["x-request-id"]]
    assert row.cache_hit and row.cost_nusd == 0
    metrics = httpx.get(f"{edge.url}/metrics").text
    assert 'tiergate_cache_requests_total{result="semantic"}' in metrics


def test_a_streamed_request_replays_a_semantic_hit(edge: Gateway) -> None:
    first = ask(edge, "How many legs does a spider have?")
    body = {"stream": True}
    again = ask(edge, "What is the number of legs on a spider?", **body)
    assert again.headers["x-tiergate-cache"] == "semantic"
    pieces = [line for line in again.text.splitlines() if line.startswith("data: {")]
    assert pieces and again.text.rstrip().endswith("data: [DONE]")
    assert text_of(first)  # a real answer was stored


def test_a_near_miss_is_answered_fresh(edge: Gateway) -> None:
    ask(edge, "What is the boiling point of water?")
    assert ask(edge, "What is the freezing point of water?").headers["x-tiergate-cache"] == "miss"
    ask(edge, "What is 15 times 12?")
    assert ask(edge, "What is 15 times 13?").headers["x-tiergate-cache"] == "miss"


def test_a_synonym_swap_is_a_hit_when_wordnet_is_there_and_an_antonym_never(edge: Gateway) -> None:
    wordnet = Path(load_settings().build_cache_dir).expanduser() / FOLDER
    if not (wordnet / "index.noun").is_file():
        pytest.skip(f"WordNet is not in {wordnet} (scripts/setup.sh)")
    ask(edge, "What is the largest planet in our solar system?")
    hit = ask(edge, "Which planet in the solar system is the biggest?")  # largest / biggest: one synset
    assert hit.headers["x-tiergate-cache"] == "semantic"
    ask(edge, "What is the warmest month in Sydney?")
    assert ask(edge, "What is the coldest month in Sydney?").headers["x-tiergate-cache"] == "miss"


def test_another_context_never_matches(edge: Gateway) -> None:
    ask(edge, "Who wrote Pride and Prejudice?")  # "who wrote" / "who is the author of": a swap, a miss
    system = [{"role": "system", "content": "Answer in French."}]
    assert (
        ask(edge, "Who wrote the novel Pride and Prejudice?", messages=system).headers["x-tiergate-cache"]
        == "miss"
    )
    assert (
        ask(edge, "Who wrote the novel Pride and Prejudice?", max_tokens=9).headers["x-tiergate-cache"]
        == "miss"
    )
    earlier = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello!"}]
    assert (
        ask(edge, "Who wrote the novel Pride and Prejudice?", messages=earlier).headers["x-tiergate-cache"]
        == "miss"
    )
    assert ask(edge, "Who wrote the novel Pride and Prejudice?").headers["x-tiergate-cache"] == "semantic"


def test_another_tenant_never_gets_the_hit_and_the_cache_is_off_by_default(edge: Gateway) -> None:
    ask(edge, "How do I reverse a list in Python?")
    other = tenant_key(edge, "semantic-other")  # the configured default policy: semantic on
    assert ask(edge, "What's the way to reverse a Python list?", other).headers["x-tiergate-cache"] == "miss"
    plain = tenant_key(edge, "semantic-plain", {"strategy": "learned"})  # a policy of its own: off
    ask(edge, "How do I delete a branch in git?", plain)
    repeat = ask(edge, "How do I delete a branch in git?", plain)
    assert repeat.headers["x-tiergate-cache"] == "hit"  # the exact cache still answers
    assert "embed;dur=" not in repeat.headers["server-timing"]
    paraphrase = ask(edge, "How do I delete a git branch?", plain)
    assert (
        paraphrase.headers["x-tiergate-cache"] == "miss" and "x-tiergate-similarity" not in paraphrase.headers
    )


def test_tool_results_and_sampling_are_skipped_unless_the_policy_allows(edge: Gateway) -> None:
    turns = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    ask(edge, "Summarize the weather report.", messages=turns)
    skipped = ask(edge, "Give me a summary of the weather report.", messages=turns)
    assert (
        skipped.headers["x-tiergate-cache"] == "miss" and "embed;dur=" not in skipped.headers["server-timing"]
    )
    sampled = ask(edge, "Name a colour of the rainbow.", temperature=0.9)
    assert (
        sampled.headers["x-tiergate-cache"] == "bypass"
        and "embed;dur=" not in sampled.headers["server-timing"]
    )

    allowing = {"semantic_cache": {"enabled": True, "allow_tools": True, "allow_sampling": True}}
    key = tenant_key(edge, "semantic-allows", allowing)
    ask(edge, "Summarize the weather report.", key, messages=turns)
    assert (
        ask(edge, "Give me a summary of the weather report.", key, messages=turns).headers["x-tiergate-cache"]
        == "semantic"
    )
    ask(edge, "Name a colour of the rainbow.", key, temperature=0.9)
    assert (
        # "any", not "one": the guard counts "one" .. "twelve" as numbers (one die / two dice)
        ask(edge, "Name any colour of the rainbow.", key, temperature=0.9).headers["x-tiergate-cache"]
        == "semantic"
    )


def test_a_bad_threshold_is_a_400_naming_it(edge: Gateway) -> None:
    for threshold in (0, 1.5, "high"):
        body = {"semantic_cache": {"enabled": True, "threshold": threshold}}
        resp = admin(edge, "PUT", "/tenants/default/policy", json=body)
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["param"] == "semantic_cache.threshold"
    unknown = admin(edge, "PUT", "/tenants/default/policy", json={"semantic_cache": {"enable": True}})
    assert unknown.status_code == 400


def test_the_index_survives_a_restart(tmp_path: Path) -> None:
    gw = start_gateway(tmp_path, CONFIG)
    try:
        first = ask(gw, "What is the tallest mountain in the world?")
        assert first.headers["x-tiergate-cache"] == "miss"
    finally:
        gw.stop()
    assert (tmp_path / "data" / "cache" / "semantic" / "index.msgpack").is_file()
    again = start_gateway(tmp_path, CONFIG)
    try:
        hit = ask(again, "Which is the tallest mountain in the world?")
        assert hit.headers["x-tiergate-cache"] == "semantic"
        assert text_of(hit) == text_of(first)
    finally:
        again.stop()


def test_two_gateways_on_one_redis_share_hits(tmp_path: Path, redis_server: RedisServer) -> None:
    stream = f"tiergate:semantic:{uuid.uuid4().hex}"  # this test's own stream on the shared server
    config = (
        f'{CONFIG}[cache]\nbackend = "redis"\nredis_url = "{redis_server.url}"\n'
        f'[cache.semantic]\nredis_stream = "{stream}"\n'
    )
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one = start_gateway(tmp_path / "one", config)
    two = start_gateway(tmp_path / "two", config)
    try:
        first = ask(one, "What is the largest ocean on Earth?")
        assert first.headers["x-tiergate-cache"] == "miss"
        time.sleep(0.5)  # the entry travels: gateway one's append, gateway two's blocked read
        hit = ask(two, "Which is the largest ocean on Earth?")
        assert hit.headers["x-tiergate-cache"] == "semantic", "gateway two did not see gateway one's entry"
        assert text_of(hit) == text_of(first)
        (tmp_path / "three").mkdir()
        three = start_gateway(tmp_path / "three", config)
        try:  # a gateway started later catches up from the stream
            assert (
                ask(three, "Which ocean on Earth is the largest?").headers["x-tiergate-cache"] == "semantic"
            )
        finally:
            three.stop()
    finally:
        one.stop()
        two.stop()
