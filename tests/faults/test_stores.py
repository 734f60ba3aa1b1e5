"""Stores failing under a running gateway: the cache's disk full, Redis and PostgreSQL going away
and coming back. Requests keep being answered; the stores are used again once they are back, and
no ledger row is lost."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import Gateway, free_port
from tests.fakes import FakeVLLM
from tests.faults._support import Postgres, chat, start_cloud_gateway
from tests.redis_server import start_redis


def ask(gw: Gateway, content: str, **body: object) -> httpx.Response:
    resp = chat(gw, messages=[{"role": "user", "content": content}], temperature=0, **body)
    assert resp.status_code == 200, resp.text
    if body.get("stream"):
        assert resp.text.rstrip().endswith("data: [DONE]")
    return resp


def cache_status(gw: Gateway, content: str, **body: object) -> str:
    return ask(gw, content, **body).headers["x-tiergate-cache"]


def metric(gw: Gateway, name: str) -> float:
    text = httpx.get(f"{gw.url}/metrics").text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (needs root and the right to mount, else the test is skipped)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == 28  # ENOSPC
        while True:  # the last few bytes
            try:
                os.write(fd, b"\0")
            except OSError:
                break
    finally:
        os.close(fd)


def test_a_full_disk_turns_the_cache_off_not_the_gateway(tmp_path: Path, tiny_disk: Path) -> None:
    with FakeVLLM() as fake:
        gw = start_cloud_gateway(
            tmp_path, fake.url, tables=f'[cache]\ndirectory = "{tiny_disk / "results"}"\n'
        )
        try:
            assert [cache_status(gw, "one") for _ in range(2)] == ["miss", "hit"]
            fill(tiny_disk / "filler")
            assert [cache_status(gw, "two") for _ in range(2)] == ["miss", "miss"]
            assert [cache_status(gw, "three", stream=True) for _ in range(2)] == ["miss", "miss"]
            assert metric(gw, 'tiergate_cache_errors_total{op="set"}') >= 4
            assert cache_status(gw, "one") == "hit"  # what is stored is still served
            (tiny_disk / "filler").unlink()
            assert [cache_status(gw, "two") for _ in range(2)] == ["miss", "hit"]
            assert "Traceback" not in gw.log()
        finally:
            gw.stop()


def test_redis_going_away_and_coming_back(tmp_path: Path) -> None:
    """Cache and rate limits on Redis: without it, requests are served (cache misses, limits
    counted in the process); once it is back, both use it again."""
    server = start_redis(tmp_path / "redis", free_port())
    url = server.url
    tables = (
        f'[cache]\nbackend = "redis"\nredis_url = "{url}"\n'
        f'[limits]\nredis_url = "{url}"\n[limits.default]\nrequests_per_min = 1000\n'
    )
    with FakeVLLM() as fake:
        gw = start_cloud_gateway(tmp_path, fake.url, tables=tables)
        try:
            client = redis.Redis.from_url(url)
            assert [cache_status(gw, "one") for _ in range(2)] == ["miss", "hit"]
            assert client.keys("tiergate:rl:*")  # the limits are counted in Redis
            server.stop()
            for _ in range(3):
                started = time.monotonic()
                assert cache_status(gw, "two") == "miss"
                assert time.monotonic() - started < 10  # bounded by cache.redis_timeout_s, not hung
            assert cache_status(gw, "one", stream=True) == "miss"
            server = start_redis(tmp_path / "redis", server.port)  # back, empty, on the same port
            gw.wait(lambda: cache_status(gw, "three") == "hit", 20, "the Redis cache to be used again")
            gw.wait(lambda: bool(client.keys("tiergate:rl:*")), 20, "limits counted in Redis again")
        finally:
            gw.stop()
            server.stop()


@pytest.fixture
def postgres() -> Iterator[Postgres]:
    pg = Postgres()
    pg.start()
    yield pg
    pg.remove()


def test_postgresql_going_away_and_coming_back_loses_no_ledger_row(
    tmp_path: Path, postgres: Postgres
) -> None:
    tables = (
        f'[storage]\ndatabase_url = "{postgres.url}"\n[ledger]\nflush_interval_s = 0.2\n'
        "[auth]\nkey_cache_s = 0.1\n"  # so that every request would look its key up
    )
    with FakeVLLM() as fake:
        gw = start_cloud_gateway(tmp_path, fake.url, tables=tables)
        try:
            for i in range(3):
                ask(gw, f"before {i}", stream=bool(i % 2))
            postgres.stop()
            time.sleep(0.3)
            for i in range(6):
                ask(gw, f"during {i}", stream=bool(i % 2))  # a key seen before is still trusted
            unknown = httpx.post(
                f"{gw.url}/v1/chat/completions",
                json={"model": "cloud", "messages": [{"role": "user", "content": "x"}]},
                headers={"Authorization": "Bearer tg_0123456789abcdef_" + "x" * 32},
            )
            assert unknown.status_code in (401, 503), unknown.text  # never a 500
            postgres.start()
            for i in range(2):
                ask(gw, f"after {i}")

            def rows() -> int:
                found = postgres.query("SELECT count(*) FROM ledger WHERE status = 200")
                return int(found[0][0])  # type: ignore[call-overload]

            gw.wait(lambda: rows() == 11, 30, "every answered request's row in PostgreSQL")
            time.sleep(1)
            assert rows() == 11  # and none twice
        finally:
            gw.stop()
