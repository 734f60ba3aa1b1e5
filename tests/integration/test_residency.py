"""Residency rules through a real gateway: the edge (real llama.cpp, location "local") and a cloud tier
(location "remote") that records every body it receives and answers with the last message's text,
streamed three characters a chunk (tests/fakes.py, mode "echo").

The last test puts a real vLLM server (the suite's local one) behind a recording proxy instead.

Shown: with ``keep_local`` no detected value reaches the remote tier (the edge serves; a request
pinned to the cloud is a 400 that names the rule); with ``redact`` the remote tier sees placeholders
and the client gets the values back, JSON and streamed (placeholders split across chunks included),
in text and in the Responses API; ``refuse`` is a 400; the route reason and the ledger name the rule
and its action, never the value.
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from tests.conftest import Gateway, start_gateway
from tests.fakes import FakeVLLM, ThreadedApp

IBAN = "DE89 3704 0044 0532 0130 00"
EMAIL = "anna.schmidt@example.com"
CARD = "4111 1111 1111 1111"
KEY = "sk-proj-4fX9aQ2mZ7LwP0sK3dR8tY1uV6bN5cE2"
RULES = [
    {"detector": "iban", "action": "keep_local"},
    {"detector": "email", "action": "redact"},
    {"detector": "card", "action": "redact", "name": "payment-card"},
    {"detector": "secret", "action": "refuse"},
]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM(mode="echo") as cloud:
        yield cloud


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, fake: FakeVLLM) -> Iterator[Gateway]:
    config = (
        f'[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\n'
        'abilities = ["tools", "json_object", "json_schema", "logprobs", "n"]\n'
        "[ledger]\nflush_interval_s = 0.1\n"
    )
    gw = start_gateway(tmp_path_factory.mktemp("residency"), config)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    admin = {"Authorization": f"Bearer {gw.admin_key}"}
    resp = httpx.put(f"{gw.url}/admin/api/policies/default", json={"residency": RULES}, headers=admin)
    assert resp.status_code == 200, resp.text
    yield gw
    gw.stop()


def client(gw: Gateway) -> openai.OpenAI:
    return gw.client(default_headers={"Cache-Control": "no-store"}, timeout=120)


def sent(fake: FakeVLLM, since: int) -> str:
    """Every body the remote tier received since request ``since``, as one text."""
    return json.dumps(fake.requests[since:])


def test_keep_local_serves_on_the_edge_and_nothing_reaches_the_cloud(gw: Gateway, fake: FakeVLLM) -> None:
    before = len(fake.requests)
    raw = client(gw).chat.completions.with_raw_response.create(
        model="tiergate-auto",
        messages=[{"role": "user", "content": f"Is {IBAN} a valid IBAN? Answer yes or no."}],
        max_tokens=4,
    )
    assert raw.headers["x-tiergate-tier"] == "edge"
    assert "iban -> keep_local" in raw.headers["x-tiergate-route-reason"]
    assert IBAN not in sent(fake, before) and IBAN.replace(" ", "") not in sent(fake, before)


def test_keep_local_pinned_to_the_remote_tier_is_a_400_naming_the_rule(gw: Gateway, fake: FakeVLLM) -> None:
    before = len(fake.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        client(gw).chat.completions.create(
            model="cloud", messages=[{"role": "user", "content": f"Pay to {IBAN}."}], max_tokens=4
        )
    assert caught.value.code == "residency_keep_local" and "'iban'" in caught.value.message
    assert len(fake.requests) == before  # no call to the cloud at all


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_redact_hides_the_values_from_the_cloud_and_restores_them(
    gw: Gateway, fake: FakeVLLM, stream: bool
) -> None:
    before = len(fake.requests)
    text = f"Write to {EMAIL} and charge card {CARD}, or {EMAIL} again."
    params: dict[str, Any] = {
        "model": "cloud",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 64,
    }
    if stream:
        chunks = list(client(gw).chat.completions.create(stream=True, **params))
        answer = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        answer = client(gw).chat.completions.create(**params).choices[0].message.content
    body = sent(fake, before)
    assert EMAIL not in body and CARD not in body, body
    assert "[EMAIL_1]" in body and "[PAYMENT_CARD_1]" in body
    assert answer == text  # the echo, with every value put back


def test_redact_in_the_responses_api_streamed(gw: Gateway, fake: FakeVLLM) -> None:
    before = len(fake.requests)
    text = f"Contact {EMAIL} please."
    events = list(client(gw).responses.create(model="cloud", input=text, stream=True, max_output_tokens=64))
    assert EMAIL not in sent(fake, before)
    assert events[-1].type == "response.completed" and events[-1].response.output_text == text


def test_refuse_is_a_400_and_nothing_is_sent(gw: Gateway, fake: FakeVLLM) -> None:
    before = len(fake.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        client(gw).chat.completions.create(
            model="tiergate-auto", messages=[{"role": "user", "content": f"my key is {KEY}"}], max_tokens=4
        )
    assert caught.value.code == "residency_refused"
    assert len(fake.requests) == before


def test_the_ledger_names_the_rule_and_never_the_value(gw: Gateway) -> None:
    client(gw).chat.completions.create(
        model="cloud", messages=[{"role": "user", "content": f"mail {EMAIL}"}], max_tokens=8
    )
    database = gw.data_dir / "tiergate.db"
    deadline = time.monotonic() + 10
    rows: list[tuple[str, ...]] = []
    while time.monotonic() < deadline and not rows:
        with sqlite3.connect(database) as conn:
            rows = conn.execute("SELECT * FROM ledger WHERE route_reason LIKE '%email -> redact%'").fetchall()
        time.sleep(0.2)
    assert rows
    assert not any(EMAIL in str(value) for row in rows for value in row)
    metrics = httpx.get(f"{gw.url}/metrics").text
    assert 'tiergate_residency_matches_total{action="redact",rule="email"}' in metrics


def test_the_live_page_counts_the_rules_that_matched(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError):  # refused requests are counted too
        client(gw).chat.completions.create(
            model="tiergate-auto", messages=[{"role": "user", "content": f"key {KEY}"}], max_tokens=4
        )
    with httpx.Client(base_url=gw.url, timeout=10) as operator:
        form = operator.get("/admin/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        signed_in = operator.post("/admin/login", data={"key": gw.admin_key, "csrf_token": token[1]})
        assert signed_in.status_code == 303
        live = operator.get("/admin/data/live").json()
        panel = operator.get("/admin/live/panel").text
    matched = live["summary"]["residency"]
    assert matched.get("secret -> refuse", 0) >= 1 and matched.get("iban -> keep_local", 0) >= 1
    assert any(d["residency"] == ["secret -> refuse"] and d["status"] == 400 for d in live["recent"])
    assert 'data-residency="secret -&gt; refuse"' in panel
    assert KEY not in json.dumps(live) and IBAN not in panel


# -- a real vLLM behind a recording proxy ------------------------------------------------------------


class RecordingProxy(ThreadedApp):
    """Forwards every request to ``upstream`` (a real vLLM server), streaming answers back as they
    come, and keeps every request body it forwarded."""

    def __init__(self, upstream: str) -> None:
        super().__init__(client_max_size=8 << 20)
        self.upstream = upstream
        self.bodies: list[bytes] = []
        self._session: aiohttp.ClientSession | None = None  # made on its loop, at the first request

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self._forward)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        body = await request.read()
        if body:
            self.bodies.append(body)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "x-request-id")}
        async with self._session.request(
            request.method, self.upstream + request.path_qs, data=body or None, headers=headers
        ) as upstream:
            resp = web.StreamResponse(status=upstream.status, headers={"Content-Type": upstream.content_type})
            await resp.prepare(request)
            async for piece in upstream.content.iter_any():
                await resp.write(piece)
            await resp.write_eof()
            return resp


@pytest.mark.cloud
def test_a_real_vllm_behind_a_recording_proxy_never_sees_a_detected_value(
    cloud_gateway: Gateway, tmp_path: Path
) -> None:
    cloud = next(t for t in cloud_gateway.readyz()["tiers"] if t["name"] == "cloud")
    upstream = cloud["instances"][0]["url"]
    with RecordingProxy(upstream) as proxy:
        gw = start_gateway(tmp_path, f'[cloud]\nurls = ["{proxy.url}"]\nhealth_interval_s = 0.5\n')
        try:
            gw.wait(lambda: gw.tier_health("cloud") == "ready", 60, "the proxied vLLM")
            admin = {"Authorization": f"Bearer {gw.admin_key}"}
            put = httpx.put(f"{gw.url}/admin/api/policies/default", json={"residency": RULES}, headers=admin)
            assert put.status_code == 200, put.text
            openai_client = client(gw)
            proxy.bodies.clear()
            text = f"Repeat exactly: {EMAIL}, card {CARD}."
            for stream in (False, True):
                params: dict[str, Any] = {
                    "model": "cloud",
                    "messages": [{"role": "user", "content": text}],
                    "max_tokens": 32,
                    "temperature": 0,
                }
                if stream:
                    assert list(openai_client.chat.completions.create(stream=True, **params))
                else:
                    assert openai_client.chat.completions.create(**params).choices
            kept = openai_client.chat.completions.with_raw_response.create(
                model="tiergate-auto",
                messages=[{"role": "user", "content": f"Is {IBAN} valid?"}],
                max_tokens=4,
            )
            assert kept.headers["x-tiergate-tier"] == "edge"
            seen = b"".join(proxy.bodies).decode()
            assert "[EMAIL_1]" in seen and "[PAYMENT_CARD_1]" in seen  # the requests did go through it
            for value in (EMAIL, CARD, IBAN, IBAN.replace(" ", "")):
                assert value not in seen
        finally:
            gw.stop()


# -- one front: the same rule on every endpoint -------------------------------------------------------

EMBEDDING_MODEL = "all-MiniLM-L6-v2"


def _ask(c: openai.OpenAI, endpoint: str, model: str, text: str) -> Any:
    """``text`` sent to ``endpoint`` as its client would send it; the raw response (headers too)."""
    if endpoint == "messages":  # Anthropic's client, with the same key and headers
        return anthropic.Anthropic(
            base_url=str(c.base_url).removesuffix("/v1/"),
            api_key=c.api_key,
            max_retries=0,
            default_headers={"Cache-Control": "no-store"},
        ).messages.with_raw_response.create(
            model=model, max_tokens=4, messages=[{"role": "user", "content": text}]
        )
    if endpoint == "chat":
        return c.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": text}], max_tokens=4
        )
    if endpoint == "responses":
        return c.responses.with_raw_response.create(model=model, input=text, max_output_tokens=16)
    if endpoint == "completions":
        return c.completions.with_raw_response.create(model=model, prompt=text, max_tokens=4)
    return c.embeddings.with_raw_response.create(model=EMBEDDING_MODEL, input=[text, "plain words"])


ENDPOINTS = ["chat", "responses", "completions", "embeddings", "messages"]
BAD_REQUEST = (openai.BadRequestError, anthropic.BadRequestError)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_refuse_holds_on_every_endpoint(gw: Gateway, fake: FakeVLLM, endpoint: str) -> None:
    before = len(fake.requests)
    with pytest.raises(BAD_REQUEST) as caught:
        _ask(client(gw), endpoint, "tiergate-auto", f"my key is {KEY}")
    if isinstance(caught.value, anthropic.BadRequestError):  # Anthropic's error shape: a type and a message
        assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
        assert "residency rule 'secret'" in caught.value.message
    else:
        assert caught.value.code == "residency_refused"
        assert caught.value.param == ("messages" if endpoint == "chat" else "input")
    assert len(fake.requests) == before  # nothing sent anywhere


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_keep_local_holds_on_every_endpoint(gw: Gateway, fake: FakeVLLM, endpoint: str) -> None:
    """The IBAN never reaches the remote tier: served locally (the edge, or the in-process embedding
    model), and the route reason names the rule; a request pinned to the remote tier is refused."""
    before = len(fake.requests)
    raw = _ask(client(gw), endpoint, "tiergate-auto", f"Is {IBAN} a valid IBAN?")
    assert raw.headers["x-tiergate-tier"] == ("embedding" if endpoint == "embeddings" else "edge")
    assert "iban -> keep_local" in raw.headers["x-tiergate-route-reason"]
    if endpoint != "embeddings":
        with pytest.raises(BAD_REQUEST) as caught:
            _ask(client(gw), endpoint, "cloud", f"Pay to {IBAN}.")
        if isinstance(caught.value, openai.BadRequestError):
            assert caught.value.code == "residency_keep_local"
        else:
            assert "residency rule 'iban'" in caught.value.message
    assert IBAN not in sent(fake, before) and IBAN.replace(" ", "") not in sent(fake, before)
