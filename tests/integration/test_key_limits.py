"""Keys with their own limits through a real gateway, on every endpoint: the edge (real llama.cpp), a
cloud tier that records every body it receives (tests/fakes.py, mode "echo"), the embedding model and
the speech model.  One parametrized test per rule over chat, Responses, completions, embeddings,
Anthropic's /v1/messages and audio transcription:

- a key at its budget gets OpenAI's quota error (429 insufficient_quota; Retry-After and
  x-should-retry: false) while another key of its tenant works;
- a key limited to the edge never reaches the cloud, pinned or routed (served by the edge); pinned, or
  routed by its tenant's policy to the cloud, it gets OpenAI's 403 for a model a key may not use
  (invalid_request_error, model_not_found);
- a key limited to other models gets OpenAI's 404 model_not_found;
- an expired key is a 401, as an invalid one;
- a rotated key works during its overlap and not after (an overlap of ~1 s);
- a key over its own requests per minute gets 429 with Retry-After while its tenant's other key works.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests import speech_files
from tests.conftest import TIERGATE, Gateway, start_gateway
from tests.fakes import FakeVLLM
from tests.integration.test_tenants_api import admin, fresh_minute

pytestmark = pytest.mark.skipif(speech_files.ESPEAK is None, reason="espeak-ng is not installed")

ENDPOINTS = ["chat", "responses", "completions", "embeddings", "messages", "audio"]
GENERATING = {"chat", "responses", "completions", "messages"}  # the ones a tier answers
EMBEDDING_MODEL, SPEECH_MODEL = "all-MiniLM-L6-v2", "whisper-1"
NO_STORE = {"Cache-Control": "no-store"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM(mode="echo") as cloud:
        yield cloud


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, fake: FakeVLLM) -> Iterator[Gateway]:
    config = (
        f'[cloud]\nurls = ["{fake.url}"]\nhealth_interval_s = 0.2\n'
        "[auth]\nkey_cache_s = 0.2\nlast_used_flush_s = 0.2\n[ledger]\nflush_interval_s = 0.1\n"
        "[router]\nbudget_refresh_s = 0.2\n[speech]\npreload = true\n"
    )
    gw = start_gateway(tmp_path_factory.mktemp("keylimits"), config)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def tenant(gw: Gateway) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    assert admin(gw, "POST", "/tenants", json={"name": name}).status_code == 201
    return name


@pytest.fixture(scope="module")
def speech() -> bytes:
    return speech_files.spoken("Please open the window.")


def new_key(gw: Gateway, tenant: str, **limits: Any) -> dict[str, Any]:
    made = admin(gw, "POST", "/keys", json={"tenant": tenant, "limits": limits})
    assert made.status_code == 201, made.text
    return dict(made.json())


def send(gw: Gateway, endpoint: str, key: str, speech: bytes, model: str | None = None) -> httpx.Response:
    """One small request to ``endpoint`` with ``key``; ``model``: a tier's name, else the router's."""
    auth = {"Authorization": f"Bearer {key}", **NO_STORE}
    model = model or {"embeddings": EMBEDDING_MODEL, "audio": SPEECH_MODEL}.get(endpoint, "tiergate-auto")
    url, kw = f"{gw.url}/v1", {"headers": auth, "timeout": 120}
    hi = [{"role": "user", "content": "Say hi."}]
    if endpoint == "chat":
        return httpx.post(
            f"{url}/chat/completions", json={"model": model, "messages": hi, "max_tokens": 4}, **kw
        )
    if endpoint == "responses":
        body = {"model": model, "input": "Say hi.", "max_output_tokens": 16, "store": False}
        return httpx.post(f"{url}/responses", json=body, **kw)
    if endpoint == "completions":
        return httpx.post(f"{url}/completions", json={"model": model, "prompt": "Hi", "max_tokens": 4}, **kw)
    if endpoint == "embeddings":
        return httpx.post(f"{url}/embeddings", json={"model": model, "input": "hi"}, **kw)
    if endpoint == "messages":
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01", **NO_STORE}
        body = {"model": model, "max_tokens": 4, "messages": hi}
        return httpx.post(f"{url}/messages", json=body, headers=headers, timeout=120)
    files = {"file": ("speech.wav", speech, "audio/wav")}
    return httpx.post(f"{url}/audio/transcriptions", data={"model": model}, files=files, **kw)


def refused(resp: httpx.Response, endpoint: str, status: int, code: str | None = None) -> str:
    """The error's type, checked to be in the shape the endpoint's clients expect (OpenAI's, or
    Anthropic's on /v1/messages)."""
    assert resp.status_code == status, (endpoint, resp.status_code, resp.text[:400])
    body = resp.json()
    if endpoint == "messages":
        assert body["type"] == "error" and set(body["error"]) >= {"type", "message"}
        return str(body["error"]["type"])
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    if code is not None:
        assert body["error"]["code"] == code, body
    return str(body["error"]["type"])


@pytest.fixture(scope="module")
def spent(gw: Gateway, tenant: str, speech: bytes) -> str:
    """A key whose day budget ($0.000001) one cloud answer spends; its budget is read from the ledger."""
    key = new_key(gw, tenant, budget_day_usd=0.000001)["key"]
    assert send(gw, "chat", key, speech, model="cloud").status_code == 200
    gw.wait(
        lambda: send(gw, "chat", key, speech, model="cloud").status_code == 429, 15, "the key's budget read"
    )
    return str(key)


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_key_at_its_budget_gets_429_and_its_tenants_other_key_still_works(
    gw: Gateway, tenant: str, spent: str, speech: bytes, endpoint: str
) -> None:
    other = new_key(gw, tenant)["key"]
    resp = send(gw, endpoint, spent, speech)
    kind = refused(resp, endpoint, 429, None if endpoint == "messages" else "insufficient_quota")
    assert kind == "rate_limit_error" if endpoint == "messages" else kind == "insufficient_quota"
    assert "You exceeded your current quota, please check your plan and billing details" in resp.text
    assert "over budget" in resp.text and int(resp.headers["retry-after"]) >= 1
    assert resp.headers["x-should-retry"] == "false"  # OpenAI's SDKs do not retry a spent budget
    assert send(gw, endpoint, other, speech).status_code == 200


@pytest.fixture(scope="module")
def cloud_tenant(gw: Gateway) -> str:
    """A tenant whose routing policy sends text to the cloud tier (a modality rule: no other tier)."""
    name = f"c-{uuid.uuid4().hex[:8]}"
    assert admin(gw, "POST", "/tenants", json={"name": name}).status_code == 201
    put = admin(gw, "PUT", f"/tenants/{name}/policy", json={"modality_rules": {"text": "cloud"}})
    assert put.status_code == 200, put.text
    return name


def not_allowed(resp: httpx.Response, endpoint: str) -> None:
    """OpenAI's answer to a key restricted from a model: 403 invalid_request_error, model_not_found
    (Anthropic's permission_error on /v1/messages)."""
    kind = refused(resp, endpoint, 403, None if endpoint == "messages" else "model_not_found")
    assert kind == ("permission_error" if endpoint == "messages" else "invalid_request_error")
    assert "does not have access to model `cloud`" in resp.text


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_an_edge_only_key_never_reaches_the_cloud_pinned_or_routed(
    gw: Gateway, fake: FakeVLLM, tenant: str, cloud_tenant: str, speech: bytes, endpoint: str
) -> None:
    key = new_key(gw, tenant, tiers=["edge"])["key"]
    policed = new_key(gw, cloud_tenant, tiers=["edge"])["key"]
    before = len(fake.requests)
    routed = send(gw, endpoint, key, speech)
    assert routed.status_code == 200, routed.text[:300]
    if endpoint in GENERATING:
        assert routed.headers["x-tiergate-tier"] == "edge"
        not_allowed(send(gw, endpoint, key, speech, model="cloud"), endpoint)  # pinned
        not_allowed(send(gw, endpoint, policed, speech), endpoint)  # routed there by its tenant's policy
    else:  # no routing policy applies to the embedding and speech models
        assert send(gw, endpoint, policed, speech).status_code == 200
    assert len(fake.requests) == before  # nothing of these keys reached the cloud


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_model_the_key_may_not_use_is_openais_404(
    gw: Gateway, tenant: str, speech: bytes, endpoint: str
) -> None:
    key = new_key(gw, tenant, models=["some-other-model"])["key"]
    refused(
        send(gw, endpoint, key, speech), endpoint, 404, None if endpoint == "messages" else "model_not_found"
    )


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_an_expired_key_is_401(gw: Gateway, tenant: str, speech: bytes, endpoint: str) -> None:
    key = new_key(gw, tenant, expires_at="2020-01-31T00:00:00Z")["key"]
    refused(
        send(gw, endpoint, key, speech), endpoint, 401, None if endpoint == "messages" else "invalid_api_key"
    )
    later = new_key(gw, tenant, expires_at="2099-01-31T00:00:00Z")["key"]
    assert send(gw, endpoint, later, speech).status_code == 200


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_rotated_key_works_in_its_overlap_and_not_after(
    gw: Gateway, tenant: str, speech: bytes, endpoint: str
) -> None:
    made = new_key(gw, tenant)
    rotated = admin(gw, "POST", f"/keys/{made['id']}/rotate", json={"overlap_hours": 2 / 3600})
    assert rotated.status_code == 201 and rotated.json()["id"] == made["id"]
    new = rotated.json()["key"]
    assert new != made["key"]
    assert send(gw, endpoint, made["key"], speech).status_code == 200  # in the overlap
    time.sleep(2.2)
    refused(send(gw, endpoint, made["key"], speech), endpoint, 401)
    assert send(gw, endpoint, new, speech).status_code == 200


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_a_key_over_its_own_requests_per_minute_gets_429(
    gw: Gateway, tenant: str, speech: bytes, endpoint: str
) -> None:
    key, other = new_key(gw, tenant, requests_per_min=2)["key"], new_key(gw, tenant)["key"]
    fresh_minute()
    assert [send(gw, endpoint, key, speech).status_code for _ in range(2)] == [200, 200]
    over = send(gw, endpoint, key, speech)
    refused(over, endpoint, 429)
    assert int(over.headers["retry-after"]) >= 1 and "requests per minute" in over.text
    assert send(gw, endpoint, other, speech).status_code == 200


def test_a_key_over_its_own_tokens_per_minute_gets_429(gw: Gateway, tenant: str, speech: bytes) -> None:
    key, other = new_key(gw, tenant, tokens_per_min=5)["key"], new_key(gw, tenant)["key"]
    fresh_minute()
    assert send(gw, "chat", key, speech, model="cloud").status_code == 200  # its tokens, charged after
    over = send(gw, "chat", key, speech, model="cloud")
    refused(over, "chat", 429, "rate_limit_exceeded")
    assert "tokens per minute" in over.text and f"key {key.split('_')[1]!r}" in over.text
    assert send(gw, "chat", other, speech, model="cloud").status_code == 200


def test_only_an_admin_key_sets_changes_or_rotates_a_keys_limits(gw: Gateway, tenant: str) -> None:
    boss = new_key(gw, tenant)  # an inference key cannot manage keys at all
    made = admin(gw, "POST", f"/tenants/{tenant}/keys", json={"role": "tenant-admin"})
    assert made.status_code == 201
    tadmin = made.json()["key"]
    worker = admin(gw, "POST", f"/tenants/{tenant}/keys", tadmin, json={"name": "w"})
    assert worker.status_code == 201  # a tenant-admin key still mints plain keys for its tenant
    wid = worker.json()["id"]
    for key in (tadmin, boss["key"]):
        limited = admin(gw, "POST", "/keys", key, json={"tenant": tenant, "limits": {"tiers": ["edge"]}})
        assert limited.status_code == 403, limited.text
        assert admin(gw, "PATCH", f"/keys/{wid}", key, json={"requests_per_min": 0}).status_code == 403
        assert admin(gw, "POST", f"/keys/{wid}/rotate", key, json={"overlap_hours": 1}).status_code == 403
    assert admin(gw, "GET", f"/keys/{wid}").json()["limits"]["requests_per_min"] == 0  # unchanged
    changed = admin(gw, "PATCH", f"/keys/{wid}", json={"requests_per_min": 9, "models": "a,b"})
    assert changed.status_code == 200, changed.text
    assert changed.json()["limits"]["requests_per_min"] == 9 and changed.json()["limits"]["models"] == [
        "a",
        "b",
    ]
    cleared = admin(gw, "PATCH", f"/keys/{wid}", json={"models": None}).json()["limits"]
    assert cleared["models"] == [] and cleared["requests_per_min"] == 9  # the others stay
    bad = admin(gw, "PATCH", f"/keys/{wid}", json={"budget_day_usd": -1})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "budget_day_usd"
    unknown = admin(gw, "PATCH", f"/keys/{wid}", json={"budget_year_usd": 1})
    assert unknown.status_code == 400  # never accepted and ignored
    misspelt = admin(gw, "PATCH", f"/keys/{wid}", json={"tiers": ["edgy"]})
    assert misspelt.status_code == 400 and misspelt.json()["error"]["param"] == "tiers"


def test_keys_list_shows_limits_expiry_and_last_used_and_costs_group_by_key(
    gw: Gateway, tenant: str, spent: str
) -> None:
    key_id = spent.split("_")[1]
    gw.wait(
        lambda: any(k["id"] == key_id and k["last_used"] for k in admin(gw, "GET", "/keys").json()["data"]),
        10,
        "last_used to be written (batched every auth.last_used_flush_s)",
    )
    listed = {k["id"]: k for k in admin(gw, "GET", "/keys").json()["data"]}
    assert (
        listed[key_id]["limits"]["budget_day_usd"] == 0.000001
        and listed[key_id]["limits"]["expires_at"] is None
    )
    report = admin(gw, "GET", "/reports/costs", params={"tenant": tenant, "group_by": "key"}).json()
    by_key = {g["key"]: g for g in report["rows"]}
    assert by_key[key_id]["cost_usd"] > 0


def test_the_cli_creates_updates_rotates_and_lists_keys_with_their_limits(gw: Gateway, tenant: str) -> None:
    config = str(gw.log_path.parent / "tiergate.toml")

    def cli(*args: str) -> str:
        return subprocess.run(
            [TIERGATE, *args, "--config", config], capture_output=True, text=True, check=True
        ).stdout

    key = cli(
        "keys", "create", "--tenant", tenant, "--budget-day", "1.5", "--budget-month", "20",
        "--tiers", "edge", "--models", "tiergate-auto,edge", "--expires", "2027-01-31T00:00:00Z",
        "--rpm", "5", "--tpm", "1000",
    ).strip()  # fmt: skip
    key_id = key.split("_")[1]
    shown = next(k for k in json.loads(cli("keys", "list", "--tenant", tenant)) if k["id"] == key_id)
    assert shown["limits"] == {
        "budget_day_usd": 1.5,
        "budget_month_usd": 20.0,
        "tiers": ["edge"],
        "models": ["tiergate-auto", "edge"],
        "expires_at": dt.datetime(2027, 1, 31, tzinfo=dt.UTC).timestamp(),
        "requests_per_min": 5,
        "tokens_per_min": 1000,
    }
    assert "last_used" in shown
    updated = json.loads(cli("keys", "update", key_id, "--rpm", "7", "--tiers", ""))
    assert updated["limits"]["requests_per_min"] == 7 and updated["limits"]["tiers"] == []
    assert updated["limits"]["budget_day_usd"] == 1.5  # what was not given stays
    new = cli("keys", "rotate", key_id, "--overlap-hours", "0.25").strip()
    assert new.startswith(f"tg_{key_id}_") and new != key
    listed = next(k for k in json.loads(cli("keys", "list")) if k["id"] == key_id)
    assert 880 <= listed["previous_until"] - time.time() <= 900  # 0.25 h (less the CLI's start-up)
    hi = {"model": "tiergate-auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    for k in (key, new):  # both, during the overlap
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json=hi, headers={"Authorization": f"Bearer {k}"})
        assert resp.status_code == 200, resp.text
    failed = subprocess.run(
        [TIERGATE, "keys", "update", key_id, "--expires", "not a date", "--config", config],
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1 and "ISO-8601" in failed.stderr
    misspelt = subprocess.run(
        [TIERGATE, "keys", "create", "--tenant", tenant, "--tiers", "edgy", "--config", config],
        capture_output=True,
        text=True,
    )
    assert misspelt.returncode == 1 and "no tier named edgy" in misspelt.stderr
