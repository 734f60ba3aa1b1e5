"""The OpenAI API end to end on the edge tier: a real gateway, a real llama.cpp model, the official client."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time

import httpx
import openai
import pytest

from tests.conftest import Gateway

# Both answers from the tier itself, not one of them a cache replay.
FRESH = {"Cache-Control": "no-cache"}

HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]
# At temperature 0 the edge model writes this essay to well past 400 tokens.
ESSAY = [{"role": "user", "content": "Write a very long essay about the history of Rome."}]


SPEECH_MODELS = {"whisper-base", "whisper-1"}


def test_models_lists_auto_and_each_tier(gateway: Gateway) -> None:
    models = list(gateway.client().models.list())
    ids = [m.id for m in models]
    assert ids[:3] == ["tiergate-auto", "edge", "cloud"]
    # the embedding and speech models (and the speech model's alias), once scripts/setup.sh built them
    assert set(ids[3:]) <= {"all-MiniLM-L6-v2", *SPEECH_MODELS}
    for model in models:  # each says which endpoints take it
        if model.id in ids[:3]:
            expected = ["/v1/chat/completions", "/v1/responses", "/v1/completions"]
        elif model.id in SPEECH_MODELS:
            expected = ["/v1/audio/transcriptions", "/v1/audio/translations"]
        else:
            expected = ["/v1/embeddings"]
        assert model.model_extra["endpoints"] == expected


def test_chat_on_the_edge(gateway: Gateway) -> None:
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="edge", messages=HELLO, max_tokens=24, temperature=0
    )
    completion = raw.parse()
    assert raw.headers["x-tiergate-tier"] == "edge"
    assert raw.headers["x-tiergate-route-reason"] == "edge: pinned by model name"
    assert completion.model == "edge-smollm2-135m"
    assert completion.choices[0].message.role == "assistant"
    assert completion.choices[0].message.content.strip()
    assert completion.choices[0].finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage is not None and usage.prompt_tokens > 10 and 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_stream_matches_the_non_streamed_answer_and_reports_usage(gateway: Gateway) -> None:
    client = gateway.client()
    whole = client.chat.completions.create(
        model="edge", messages=HELLO, max_tokens=24, temperature=0, extra_headers=FRESH
    )
    chunks = list(
        client.chat.completions.create(
            model="edge",
            messages=HELLO,
            max_tokens=24,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers=FRESH,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert len({c.id for c in chunks}) == 1


def test_stream_ends_with_done_and_no_usage_unless_asked(gateway: Gateway) -> None:
    body = {"model": "edge", "messages": HELLO, "max_tokens": 4, "stream": True}
    with httpx.stream(
        "POST", f"{gateway.url}/v1/chat/completions", json=body, headers=gateway.auth, timeout=60
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line for line in resp.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: ") for e in events)
    assert '"usage":{' not in "".join(events)


def test_max_tokens_and_stop(gateway: Gateway) -> None:
    client = gateway.client()
    capped = client.chat.completions.create(model="edge", messages=HELLO, max_tokens=3, temperature=0)
    assert capped.usage is not None and capped.usage.completion_tokens == 3
    assert capped.choices[0].finish_reason == "length"
    count = [{"role": "user", "content": "Count from 1 to 10, separated by commas."}]
    full = client.chat.completions.create(model="edge", messages=count, max_tokens=40, temperature=0)
    stopped = client.chat.completions.create(
        model="edge", messages=count, max_tokens=40, temperature=0, stop=["5"]
    )
    text = full.choices[0].message.content or ""
    assert "5" in text, text
    assert stopped.choices[0].message.content == text[: text.index("5")]
    assert stopped.choices[0].finish_reason == "stop"


def test_request_id_comes_back_and_names_the_completion(gateway: Gateway) -> None:
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="edge", messages=HELLO, max_tokens=2, extra_headers={"X-Request-ID": "trace-42.a"}
    )
    assert raw.headers["x-request-id"] == "trace-42.a"
    assert raw.parse().id == "chatcmpl-trace-42.a"
    made = httpx.get(f"{gateway.url}/healthz", headers={"X-Request-ID": "bad id with spaces"})
    assert made.headers["x-request-id"] != "bad id with spaces" and len(made.headers["x-request-id"]) == 32


def test_auto_sends_a_small_request_to_the_edge_and_says_why(gateway: Gateway) -> None:
    raw = gateway.client().chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=HELLO, max_tokens=8
    )
    assert raw.headers["x-tiergate-tier"] == "edge"
    reason = raw.headers["x-tiergate-route-reason"]
    assert reason.startswith("edge: p95 predicted ") and "< slo" in reason


def test_concurrent_requests_queue_and_the_server_stays_responsive(gateway: Gateway) -> None:
    results: list[str] = []

    def ask() -> None:
        r = gateway.client().chat.completions.create(model="edge", messages=HELLO, max_tokens=64)
        results.append(r.choices[0].finish_reason)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    started = time.perf_counter()
    assert httpx.get(f"{gateway.url}/healthz").status_code == 200
    # generation runs off the event loop: a blocked loop would hold this for a whole answer (seconds)
    assert time.perf_counter() - started < 0.5
    for t in threads:
        t.join(120)
    assert len(results) == 4


def test_a_client_that_goes_away_frees_the_model(gateway: Gateway) -> None:
    body = {"model": "edge", "messages": ESSAY, "max_tokens": 1500, "temperature": 0, "stream": True}
    with httpx.stream(
        "POST", f"{gateway.url}/v1/chat/completions", json=body, headers=gateway.auth, timeout=60
    ) as resp:
        lines = resp.iter_lines()
        for _ in range(3):
            next(lines)
    gateway.wait(lambda: _edge(gateway)["in_flight"] == 0, 10, "the edge model to be free")
    # the model answers again (had it kept writing the 1,500-token essay, this would wait for it)
    answer = gateway.client().chat.completions.create(model="edge", messages=HELLO, max_tokens=2)
    assert answer.usage is not None and answer.usage.completion_tokens == 2


def _edge(gateway: Gateway) -> dict[str, object]:
    return next(t for t in gateway.readyz()["tiers"] if t["name"] == "edge")


def _error(resp: httpx.Response) -> dict[str, object]:
    body = resp.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert "x-request-id" in resp.headers
    return dict(body["error"])


def test_unknown_model_is_404_with_the_choices(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.client().chat.completions.create(model="gpt-9", messages=HELLO)
    assert caught.value.code == "model_not_found"
    assert "tiergate-auto" in caught.value.message


@pytest.mark.parametrize(
    ("body", "param", "says"),
    [
        (b"{", None, "not valid JSON"),
        (b"", None, "body is empty"),
        (b"[]", None, "Expected `object`"),
        (b'{"model": "edge"}', "messages", "missing required field `messages`"),
        (b'{"model": "edge", "messages": []}', "messages", "length >= 1"),
        (b'{"model": "edge", "messages": "hi"}', "messages", "Expected `array`"),
        (
            b'{"model": "edge", "messages": [{"role": "user", "content": 5}]}',
            "messages[0].content",
            "got `int`",
        ),
        (
            b'{"model": "edge", "messages": [{"role": "robot", "content": "x"}]}',
            "messages[0].role",
            "Invalid",
        ),
        (b'{"model": "edge", "messages": [{"role": "user"}]}', "messages[0].content", "has no content"),
        (
            b'{"model": "edge", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
            "max_tokens",
            ">= 1",
        ),
        (
            b'{"model": "edge", "messages": [{"role": "user", "content": "x"}], "temperature": 9}',
            "temperature",
            "",
        ),
        (b'{"model": "edge", "messages": [{"role": "user", "content": "x"}], "n": 99}', "n", "<= 8"),
        (b'{"model": 7, "messages": [{"role": "user", "content": "x"}]}', "model", "Expected `str`"),
    ],
)
def test_malformed_requests_are_400_naming_the_field(
    gateway: Gateway, body: bytes, param: str | None, says: str
) -> None:
    resp = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=body,
        headers={"Content-Type": "application/json", **gateway.auth},
    )
    assert resp.status_code == 400
    error = _error(resp)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert says in str(error["message"])


def test_oversized_body_is_413(gateway: Gateway) -> None:
    big = b'{"model": "edge", "messages": [{"role": "user", "content": "' + b"a" * (17 * 2**20) + b'"}]}'
    resp = httpx.post(f"{gateway.url}/v1/chat/completions", content=big, headers=gateway.auth, timeout=30)
    assert resp.status_code == 413
    assert _error(resp)["code"] == "payload_too_large"


def test_a_prompt_longer_than_the_edge_context_is_refused_before_it_runs(gateway: Gateway) -> None:
    long = [{"role": "user", "content": "word " * 9000}]
    with pytest.raises(openai.APIStatusError) as caught:
        gateway.client().chat.completions.create(model="edge", messages=long, max_tokens=10)
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"  # what clients look for
    assert "edge context is 2048 tokens" in caught.value.message


def test_unknown_path_and_method(gateway: Gateway) -> None:
    assert _error(httpx.get(f"{gateway.url}/v1/nothing"))["code"] == "not_found"
    assert httpx.delete(f"{gateway.url}/v1/models").status_code == 405
    assert "GET" in httpx.delete(f"{gateway.url}/v1/models").headers["Allow"]
    wrong = httpx.get(f"{gateway.url}/v1/chat/completions")  # a raw ASGI handler: it checks the method itself
    assert wrong.status_code == 405
    assert _error(wrong)["type"] == "invalid_request_error"


def test_health_and_readiness(gateway: Gateway) -> None:
    assert httpx.get(f"{gateway.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{gateway.url}/readyz")
    assert ready.status_code == 200
    assert {t["name"] for t in ready.json()["tiers"]} == {"edge", "cloud"}


def test_a_full_edge_queue_answers_429_at_once(tmp_path) -> None:
    from tests.conftest import start_gateway

    # at the assumed 2 requests/s, a 0.5 s tolerable delay bounds the fast lane at one waiter
    config = (
        "[cloud]\nenabled = false\n[edge]\nmax_sequences = 1\n"  # the serial engine: one slot
        "[admission]\ninitial_rate_per_s = 2\nmin_queue = 1\n"
        "[admission.fast]\nmax_queue_delay_s = 0.5\n"
    )
    gw = start_gateway(tmp_path, config)
    long = {"model": "edge", "messages": ESSAY, "max_tokens": 400, "temperature": 0, "stream": True}
    try:
        with (
            httpx.stream(
                "POST", f"{gw.url}/v1/chat/completions", json=long, headers=gw.auth, timeout=60
            ) as running,
            httpx.Client(timeout=60, headers=gw.auth) as waiting_client,
        ):
            lines = running.iter_lines()  # keep it: dropping the iterator closes the connection
            next(lines)  # the model is busy with this one

            def wait_in_line() -> None:
                with contextlib.suppress(httpx.HTTPError):  # the gateway stops before it is served
                    waiting_client.post(f"{gw.url}/v1/chat/completions", json={**long, "stream": False})

            waiter = threading.Thread(target=wait_in_line)
            waiter.start()
            gw.wait(lambda: _edge(gw)["queued"] == 1, 10, "one request queued")
            started = time.perf_counter()
            resp = httpx.post(f"{gw.url}/v1/chat/completions", json=long, headers=gw.auth, timeout=10)
            assert time.perf_counter() - started < 1
            assert resp.status_code == 429
            assert int(resp.headers["retry-after"]) >= 1
            assert _error(resp)["type"] == "rate_limit_exceeded"
            assert "the fast lane is full (1 waiting" in str(_error(resp)["message"])
            assert any(line.startswith("data: ") for line in itertools.islice(lines, 4))  # unaffected
    finally:
        gw.stop()
