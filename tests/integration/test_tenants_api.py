"""Tenants, keys, limits, the ledger and cost reports, through real gateways in front of a fake cloud."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from gateway.accounts.storage import ledger, open_database
from tests.conftest import TIERGATE, Gateway, children, start_gateway
from tests.fakes import FakeVLLM

HELLO = [{"role": "user", "content": "Say hello."}]


def fake_cloud_config(url: str, extra: str = "") -> str:
    return (
        f'[edge]\nenabled = false\n[cloud]\nurls = ["{url}"]\nhealth_interval_s = 0.2\n'
        f"[auth]\nkey_cache_s = 0.2\n[ledger]\nflush_interval_s = 0.1\n{extra}"
    )


def start(tmp: Path, fake: FakeVLLM, extra: str = "", **kw: Any) -> Gateway:
    tmp.mkdir(parents=True, exist_ok=True)
    gw = start_gateway(tmp, fake_cloud_config(fake.url, extra), edge=False, **kw)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    return gw


def chat(gw: Gateway, key: str | None = None, rid: str | None = None, **body: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or gw.api_key}"}
    if rid:
        headers["X-Request-ID"] = rid
    payload = {"model": "cloud", "messages": HELLO, "max_tokens": 8, **body}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=payload, headers=headers, timeout=30)


def admin(gw: Gateway, method: str, path: str, key: str | None = None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or gw.admin_key}"}
    return httpx.request(method, f"{gw.url}/admin/api{path}", headers=headers, timeout=30, **kw)


def error_of(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return dict(body["error"])


def ledger_rows(gw: Gateway, url: str | None = None, want: set[str] | None = None) -> dict[str, Any]:
    """Ledger rows by request id, waiting (briefly) until every wanted id is there."""
    engine = open_database(url or f"sqlite:///{gw.data_dir / 'tiergate.db'}")
    deadline = time.monotonic() + 10
    try:
        while True:
            with engine.connect() as conn:
                rows = {r.request_id: r for r in conn.execute(select(ledger))}
            if want is None or want <= set(rows) or time.monotonic() > deadline:
                return rows
            time.sleep(0.1)
    finally:
        engine.dispose()


def fresh_minute() -> None:
    """Limits count per clock minute: keep a short test inside one."""
    if time.time() % 60 > 50:
        time.sleep(61 - time.time() % 60)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM() as server:
        yield server


@pytest.fixture(scope="module")
def gw(fake: FakeVLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start(tmp_path_factory.mktemp("tenants"), fake)
    yield gateway
    gateway.stop()


def test_first_run_writes_the_keys_to_a_private_file_and_says_where(gw: Gateway) -> None:
    path = gw.data_dir / "initial-credentials.json"
    assert path.stat().st_mode & 0o777 == 0o600
    assert str(path) in gw.log()
    assert gw.api_key not in gw.log() and gw.admin_key not in gw.log()


def test_missing_wrong_or_malformed_keys_are_401(gw: Gateway) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": gw.api_key}):
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "cloud"}, headers=headers)
        assert resp.status_code == 401
        assert error_of(resp)["type"] == "invalid_request_error"
    wrong_secret = gw.api_key[:-4] + "AAAA"
    assert chat(gw, key=wrong_secret).status_code == 401
    assert httpx.get(f"{gw.url}/v1/models").status_code == 401
    assert httpx.get(f"{gw.url}/v1/models", headers=gw.auth).status_code == 200
    assert httpx.get(f"{gw.url}/healthz").status_code == 200  # probes stay open
    assert chat(gw, key=gw.admin_key).status_code == 403  # admin keys do not chat


def test_key_lifecycle_through_the_cli_and_the_admin_api(gw: Gateway) -> None:
    config = str(gw.log_path.parent / "tiergate.toml")

    def cli(*args: str) -> str:
        return subprocess.run(
            [TIERGATE, *args, "--config", config], capture_output=True, text=True, check=True
        ).stdout

    cli("tenants", "create", "lifecycle")
    key = cli("keys", "create", "--tenant", "lifecycle").strip()
    assert chat(gw, key=key).status_code == 200
    key_id = key.split("_")[1]
    assert '"revoked_at": null' in cli("keys", "list", "--tenant", "lifecycle")
    cli("keys", "revoke", key_id)
    gw.wait(lambda: chat(gw, key=key).status_code == 401, 5, "the revoked key to be refused")
    assert "revoked" in error_of(chat(gw, key=key))["message"]
    made = admin(gw, "POST", "/tenants/lifecycle/keys", json={"name": "api"})
    assert made.status_code == 201
    api_key = made.json()["key"]
    assert chat(gw, key=api_key).status_code == 200
    assert admin(gw, "DELETE", f"/keys/{made.json()['id']}").json()["revoked_at"] is not None
    assert chat(gw, key=api_key).status_code == 401  # at once in the gateway that revoked it
    listed = admin(gw, "GET", "/tenants/lifecycle/keys").json()["data"]
    assert {k["id"] for k in listed} == {key_id, made.json()["id"]}
    assert all("key" not in k and "key_hash" not in k for k in listed)


def test_admin_api_needs_a_key_and_a_tenant_sees_only_itself(gw: Gateway) -> None:
    assert httpx.get(f"{gw.url}/admin/api/tenants").status_code == 401
    assert admin(gw, "POST", "/tenants", json={"name": "isolated"}).status_code == 201
    assert admin(gw, "POST", "/tenants", json={"name": "isolated"}).status_code == 409
    assert admin(gw, "POST", "/tenants", json={"nom": "x"}).status_code == 400
    other = admin(gw, "POST", "/tenants/isolated/keys").json()["key"]
    assert chat(gw, key=other, rid=f"iso-{uuid.uuid4().hex}").status_code == 200
    mine = gw.api_key
    assert admin(gw, "POST", "/tenants", key=mine, json={"name": "x"}).status_code == 403
    assert [t["name"] for t in admin(gw, "GET", "/tenants", key=mine).json()["data"]] == ["default"]
    for path in ("/tenants/isolated", "/tenants/isolated/keys", "/reports/costs?tenant=isolated"):
        resp = admin(gw, "GET", path, key=mine)
        assert resp.status_code == 404, path
        assert error_of(resp)["code"] == "not_found"
    other_key_id = admin(gw, "GET", "/tenants/isolated/keys").json()["data"][0]["id"]
    assert admin(gw, "DELETE", f"/keys/{other_key_id}", key=mine).status_code == 404
    assert chat(gw, key=other).status_code == 200  # still valid: the attempt changed nothing
    ledger_rows(gw, want=set())  # let the loader catch up
    time.sleep(0.3)
    own = admin(gw, "GET", "/reports/costs?group_by=tenant", key=mine)
    assert own.status_code == 403
    own = admin(gw, "GET", "/reports/costs", key=mine).json()
    theirs = admin(gw, "GET", "/reports/costs?tenant=isolated").json()
    assert own["tenant"] == "default" and theirs["total"]["requests"] == 2
    everyone = admin(gw, "GET", "/reports/costs").json()
    assert everyone["total"]["requests"] >= own["total"]["requests"] + 2


def test_a_tenant_over_its_limit_gets_429_with_retry_after(gw: Gateway) -> None:
    admin(gw, "POST", "/tenants", json={"name": "limited", "limits": {"requests_per_min": 3}})
    key = admin(gw, "POST", "/tenants/limited/keys").json()["key"]
    fresh_minute()
    statuses = [chat(gw, key=key).status_code for _ in range(3)]
    refused = chat(gw, key=key)
    assert statuses == [200, 200, 200]
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    error = error_of(refused)
    assert error["type"] == "rate_limit_exceeded" and "limited" in error["message"]
    assert chat(gw).status_code == 200  # another tenant is not affected
    stream = chat(gw, key=key, stream=True)
    assert stream.status_code == 429


def test_every_answered_request_has_its_ledger_row_and_the_report_adds_up(gw: Gateway) -> None:
    admin(gw, "POST", "/tenants", json={"name": "counted"})
    key = admin(gw, "POST", "/tenants/counted/keys").json()["key"]
    answered = []
    for i in range(12):
        rid = f"count-{i}-{uuid.uuid4().hex[:8]}"
        resp = chat(gw, key=key, rid=rid, stream=i % 2 == 1)
        assert resp.status_code == 200
        answered.append(rid)
    failed = f"count-bad-{uuid.uuid4().hex[:8]}"
    assert chat(gw, key=key, rid=failed, model="gpt-9").status_code == 404
    rows = ledger_rows(gw, want={*answered, failed})
    for rid in answered:
        r = rows[rid]
        assert (r.status, r.tier, r.model_used, r.model_asked) == (200, "cloud", "fake", "cloud")
        assert (r.prompt_tokens, r.completion_tokens) == (3, 2), r
        assert r.cost_nusd > 0 and r.counterfactual_nusd == r.cost_nusd and r.total_ms > 0
        assert r.cache_hit is False and r.degraded is False and r.price_id is not None
    assert rows[answered[1]].ttft_ms is not None  # streams record their time to first token
    assert rows[failed].status == 404 and rows[failed].cost_nusd == 0
    mine = [r for r in rows.values() if r.request_id.startswith("count-")]
    for fmt in ("json", "csv"):
        resp = admin(gw, "GET", f"/reports/costs?tenant=counted&group_by=day,tier,model&format={fmt}")
        assert resp.status_code == 200
        if fmt == "json":
            report = resp.json()
            assert report["total"]["cost_nusd"] == sum(r.cost_nusd for r in mine)
            assert report["total"]["requests"] == 13 and report["total"]["answered"] == 12
            assert sum(r["cost_nusd"] for r in report["rows"]) == report["total"]["cost_nusd"]
        else:
            assert resp.text.splitlines()[0].startswith("day,tier,model,requests")
    cli = subprocess.run(
        [TIERGATE, "report", "--tenant", "counted", "--config", str(gw.log_path.parent / "tiergate.toml")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert '"cost_nusd": ' + str(sum(r.cost_nusd for r in mine)) in cli.stdout
    assert admin(gw, "GET", "/reports/costs?since=yesterday").status_code == 400
    assert admin(gw, "GET", "/reports/costs?group_by=colour").status_code == 400
    assert admin(gw, "GET", "/reports/costs?format=xml").status_code == 400


def test_a_cached_answer_is_recorded_as_a_hit_that_cost_nothing(gw: Gateway) -> None:
    admin(gw, "POST", "/tenants", json={"name": "cached"})
    key = admin(gw, "POST", "/tenants/cached/keys").json()["key"]
    question = [{"role": "user", "content": f"Cache me {uuid.uuid4().hex}"}]
    rids = [f"cached-{i}-{uuid.uuid4().hex[:8]}" for i in range(2)]
    first, again = (chat(gw, key=key, rid=rid, messages=question, temperature=0) for rid in rids)
    assert first.headers["x-tiergate-cache"] == "miss" and again.headers["x-tiergate-cache"] == "hit"
    rows = ledger_rows(gw, want=set(rids))
    miss, hit = rows[rids[0]], rows[rids[1]]
    assert miss.cache_hit is False and miss.cost_nusd > 0 and miss.price_id is not None
    assert hit.cache_hit is True and hit.cost_nusd == 0 and hit.price_id is None
    # What the hit saved: the same tokens at the cloud's price.
    assert hit.counterfactual_nusd == miss.cost_nusd > 0
    assert (hit.prompt_tokens, hit.completion_tokens, hit.status) == (
        miss.prompt_tokens,
        miss.completion_tokens,
        200,
    )


def test_limits_are_shared_by_two_gateways_over_redis(fake: FakeVLLM, redis_url: str, tmp_path: Path) -> None:
    shared = f'[limits]\nredis_url = "{redis_url}"\n[storage]\ndatabase_url = "sqlite:///{tmp_path / "shared.db"}"\n'
    first = start(tmp_path / "one", fake, shared)
    second = start(tmp_path / "two", fake, shared)
    try:
        second.api_key, second.admin_key = first.api_key, first.admin_key  # one database, one set of keys
        admin(first, "POST", "/tenants", json={"name": "shared", "limits": {"requests_per_min": 4}})
        key = admin(first, "POST", "/tenants/shared/keys").json()["key"]
        fresh_minute()
        statuses = [chat(gw, key=key).status_code for _ in range(4) for gw in (first, second)]
        assert statuses.count(200) == 4 and statuses.count(429) == 4
    finally:
        first.stop()
        second.stop()


def test_every_200_has_its_row_after_sigkill(fake: FakeVLLM, tmp_path: Path) -> None:
    gw = start(tmp_path, fake)
    answered: list[str] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(headers=gw.auth, timeout=10) as client:
            while not stop.is_set():
                rid = uuid.uuid4().hex
                stream = len(rid) % 2 == 0 and rid[0] in "0123456789"
                try:
                    resp = client.post(
                        f"{gw.url}/v1/chat/completions",
                        json={"model": "cloud", "messages": HELLO, "max_tokens": 8, "stream": stream},
                        headers={"X-Request-ID": rid},
                    )
                    if resp.status_code == 200 and (not stream or resp.text.endswith("data: [DONE]\n\n")):
                        answered.append(rid)
                except httpx.HTTPError:
                    return

    threads = [threading.Thread(target=load) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(2.0)
    os.kill(gw.process.pid, signal.SIGKILL)
    stop.set()
    for t in threads:
        t.join(15)
    gw.process.wait(10)
    assert len(answered) > 50, "the load should have been answered for a while"
    restarted = start(tmp_path, fake)
    try:
        rows = ledger_rows(restarted, want=set(answered))
        missing = [rid for rid in answered if rid not in rows or rows[rid].status != 200]
        assert not missing, f"{len(missing)} of {len(answered)} answered requests have no row"
        assert "replayed" in restarted.log()
    finally:
        restarted.stop()


def test_the_ledger_on_postgresql(fake: FakeVLLM, postgres_url: str, tmp_path: Path) -> None:
    gw = start(tmp_path, fake, f'[storage]\ndatabase_url = "{postgres_url}"\n')
    try:
        if not gw.api_key:  # another test created the admin on this server first
            pytest.skip("the PostgreSQL database was bootstrapped by an earlier gateway")
        rids = [f"pg-{uuid.uuid4().hex}" for _ in range(5)]
        for rid in rids:
            assert chat(gw, rid=rid).status_code == 200
        rows = ledger_rows(gw, postgres_url, want=set(rids))
        assert all(rows[rid].status == 200 for rid in rids)
        report = admin(gw, "GET", "/reports/costs?tenant=default&group_by=day,tier").json()
        assert report["total"]["answered"] >= 5
    finally:
        gw.stop()


def test_open_mode_serves_without_keys_as_the_default_tenant(fake: FakeVLLM, tmp_path: Path) -> None:
    gw = start_gateway(
        tmp_path,
        fake_cloud_config(fake.url).replace("[auth]\n", "[auth]\nopen_mode = true\n"),
        edge=False,
    )
    try:
        gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
        rid = f"open-{uuid.uuid4().hex}"
        resp = httpx.post(
            f"{gw.url}/v1/chat/completions",
            json={"model": "cloud", "messages": HELLO, "max_tokens": 4},
            headers={"X-Request-ID": rid},
        )
        assert resp.status_code == 200
        assert "open_mode is on" in gw.log()
        assert ledger_rows(gw, want={rid})[rid].key_id == "open-mode"
    finally:
        gw.stop()


def test_if_the_ledger_writer_process_dies_rows_are_still_written(fake: FakeVLLM, tmp_path: Path) -> None:
    gw = start(tmp_path, fake, 'sync = "disk"\n')  # (in [ledger]) the writer process fsyncs for "disk"
    try:
        helpers = [
            pid
            for pid in children(gw.process.pid)
            if "_walproc.py" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        ]
        assert len(helpers) == 1
        os.kill(helpers[0], signal.SIGKILL)
        rids = [f"after-{i}-{uuid.uuid4().hex[:8]}" for i in range(5)]
        for i, rid in enumerate(rids):
            assert chat(gw, rid=rid, stream=i % 2 == 0).status_code == 200
        rows = ledger_rows(gw, want=set(rids))
        assert all(rid in rows for rid in rids)
        assert "writing in-process now" in gw.log()
    finally:
        gw.stop()
