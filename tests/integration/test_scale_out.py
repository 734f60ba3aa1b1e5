"""Two gateway processes on different ports sharing one real Redis and one real PostgreSQL, in front
of a fake vLLM whose vision path fails: a tenant's rate limit holds across both, an answer cached by
one is a hit on the other, a circuit breaker opened by one is open in the other (and a gateway that
starts later takes it), a replica ejected by one is out in the other, a reload reaches both."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.conftest import TIERGATE, Gateway, start_gateway
from tests.fakes import FakeVLLM
from tests.integration.test_breakers import IMAGE_MESSAGES, breakers
from tests.integration.test_tenants_api import admin, chat, fresh_minute

THRESHOLD = 3
COOLDOWN_S = 60.0  # the breaker stays open for the whole test


def config(redis_url: str, database_url: str, cloud_url: str) -> str:
    return f"""
[edge]
enabled = false
[cloud]
urls = ["{cloud_url}"]
health_interval_s = 0.2
modalities = ["text", "image"]
[breakers]
consecutive_failures = {THRESHOLD}
cooldown_s = {COOLDOWN_S}
[auth]
key_cache_s = 0.2
[ledger]
flush_interval_s = 0.1
[cache]
backend = "redis"
redis_url = "{redis_url}"
[limits]
redis_url = "{redis_url}"
[storage]
database_url = "{database_url}"
[shared]
redis_url = "{redis_url}"
"""


@pytest.fixture
def database(postgres_url: str) -> str:
    """A database of this test's own on the session's PostgreSQL server (so it bootstraps afresh)."""
    name = f"tg_{uuid.uuid4().hex[:12]}"
    dsn = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return postgres_url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM("fail_images") as server:
        yield server


def start(tmp: Path, text: str, fake: FakeVLLM) -> Gateway:
    tmp.mkdir(parents=True, exist_ok=True)
    gw = start_gateway(tmp, text, edge=False)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    return gw


@pytest.fixture
def pair(
    tmp_path: Path, redis_url: str, database: str, fake: FakeVLLM
) -> Iterator[tuple[Gateway, Gateway, str]]:
    text = config(redis_url, database, fake.url)
    first = start(tmp_path / "one", text, fake)  # bootstraps the database: the first run's keys
    second = start(tmp_path / "two", text, fake)
    second.api_key, second.admin_key = first.api_key, first.admin_key  # one database, one set of keys
    assert first.api_key and first.url != second.url
    try:
        yield first, second, text
    finally:
        first.stop()
        second.stop()


def image_chat(gw: Gateway) -> httpx.Response:
    payload: dict[str, Any] = {"model": "tiergate-auto", "messages": IMAGE_MESSAGES, "max_tokens": 8}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=payload, headers=gw.auth, timeout=30)


def test_two_gateways_share_limits_cache_and_breakers(
    pair: tuple[Gateway, Gateway, str], fake: FakeVLLM, tmp_path: Path
) -> None:
    first, second, text = pair

    # A tenant made through one gateway (PostgreSQL) is limited across both (Redis).
    assert (
        admin(first, "POST", "/tenants", json={"name": "acme", "limits": {"requests_per_min": 4}}).status_code
        == 201
    )
    key = admin(second, "POST", "/tenants/acme/keys").json()["key"]
    fresh_minute()
    statuses = [chat(gw, key=key).status_code for _ in range(4) for gw in (first, second)]
    assert statuses.count(200) == 4 and statuses.count(429) == 4, statuses

    # An answer cached by one is a hit on the other.
    question = {"messages": [{"role": "user", "content": f"Cache me {uuid.uuid4().hex}"}], "temperature": 0}
    miss = chat(first, **question)
    assert miss.status_code == 200 and miss.headers["x-tiergate-cache"] == "miss"
    sent = len(fake.requests)
    hit = chat(second, **question)
    assert hit.headers["x-tiergate-cache"] == "hit"
    assert hit.json()["choices"][0]["message"]["content"] == miss.json()["choices"][0]["message"]["content"]
    assert len(fake.requests) == sent  # the second gateway never asked the cloud

    # A breaker opened by the first gateway is open in the second, which sends it no image.
    assert breakers(second).get(("cloud", "image"), "closed") == "closed"
    for _ in range(THRESHOLD):
        failed = image_chat(first)  # the vision path fails; nothing else takes images
        assert failed.status_code >= 500 and "vision encoder crashed" in failed.text
    assert breakers(first)[("cloud", "image")] == "open"
    second.wait(
        lambda: breakers(second).get(("cloud", "image")) == "open", 10, "the breaker to reach the second"
    )
    sent = len(fake.requests)
    degraded = image_chat(second)
    assert degraded.status_code == 200 and degraded.headers["x-tiergate-degraded"] == "image"
    assert not any("image_url" in str(r["messages"]) for r in fake.requests[sent:])
    assert breakers(second).get(("cloud", "text"), "closed") == "closed"  # text is untouched
    assert "reported by" in second.log()

    # A gateway that starts now takes the breaker that is still open.
    third = start(tmp_path / "three", text, fake)
    try:
        third.wait(lambda: breakers(third).get(("cloud", "image")) == "open", 10, "the third to catch up")
    finally:
        third.stop()


def test_a_replica_ejected_by_one_gateway_is_out_in_the_other(
    tmp_path: Path, redis_url: str, database: str
) -> None:
    with FakeVLLM() as good, FakeVLLM("reset") as bad:
        text = config(redis_url, database, good.url).replace(
            f'urls = ["{good.url}"]',
            f'urls = ["{good.url}", "{bad.url}"]\neject_after_failures = 1\neject_s = 60.0',
        )
        first = start(tmp_path / "one", text, good)
        second = start(tmp_path / "two", text, good)
        second.api_key = first.api_key
        try:

            def ejected(gw: Gateway) -> bool:
                replicas = admin_replicas(gw, first.admin_key)
                return next(r["ejected"] for r in replicas if r["url"] == bad.url)

            assert not ejected(second)
            # Requests through the first reach the resetting replica, which gets ejected there.
            for i in range(20):  # distinct conversations, so affinity does not keep them on one replica
                messages = [{"role": "user", "content": f"Question {i}"}]
                assert chat(first, messages=messages).status_code == 200  # retried on the good replica
                if ejected(first):
                    break
            assert ejected(first)
            second.wait(lambda: ejected(second), 10, "the ejection to reach the second")
            before = len(bad.requests)
            for i in range(8):
                assert chat(second, messages=[{"role": "user", "content": f"Other {i}"}]).status_code == 200
            assert len(bad.requests) == before  # the second sends the ejected replica nothing
        finally:
            first.stop()
            second.stop()


def admin_replicas(gw: Gateway, key: str) -> list[dict[str, Any]]:
    resp = httpx.get(
        f"{gw.url}/admin/api/cloud/replicas", headers={"Authorization": f"Bearer {key}"}, timeout=10
    )
    return list(resp.json())


def test_membership_and_reloads_made_through_one_gateway_reach_both(
    tmp_path: Path, redis_url: str, database: str
) -> None:
    with FakeVLLM() as one, FakeVLLM() as two:
        text = config(redis_url, database, one.url)
        first = start(tmp_path / "one", text, one)
        second = start(tmp_path / "two", text, one)

        def members(gw: Gateway) -> set[str]:
            return {r["url"] for r in admin_replicas(gw, first.admin_key) if not r["draining"]}

        def set_urls(urls: list[str]) -> None:  # each gateway has its own file; an operator edits both
            for gw in (first, second):
                path = gw.data_dir.parent / "tiergate.toml"
                path.write_text(re.sub(r"urls = \[.*\]", f"urls = {json.dumps(urls)}", path.read_text()))

        try:
            # The admin API of the first sets the pool of both.
            urls = [one.url, two.url]
            resp = httpx.put(
                f"{first.url}/admin/api/cloud/replicas", json={"urls": urls}, headers=first.admin, timeout=10
            )
            assert resp.status_code == 200
            second.wait(lambda: members(second) == set(urls), 10, "the membership to reach the second")
            second.wait(
                lambda: all(r["healthy"] for r in admin_replicas(second, first.admin_key)),
                10,
                "health checks",
            )

            # SIGHUP to the first: both re-read their files.
            set_urls([two.url])
            first.process.send_signal(signal.SIGHUP)
            second.wait(lambda: members(second) == {two.url}, 10, "the reload to reach the second")
            assert members(first) == {two.url}

            # `tiergate reload` reaches every gateway.
            set_urls([one.url])
            done = subprocess.run(
                [TIERGATE, "reload", "--config", str(first.data_dir.parent / "tiergate.toml")],
                capture_output=True,
                text=True,
                check=True,
            )
            assert "2 gateway(s) listening" in done.stdout
            for gw in (first, second):
                gw.wait(lambda gw=gw: members(gw) == {one.url}, 10, "the reload")
        finally:
            first.stop()
            second.stop()
