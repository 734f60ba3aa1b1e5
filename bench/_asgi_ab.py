"""The gateway's own CPU per request with observability on vs off, without network or processes:
the Litestar app is called as an ASGI callable, its cloud tier an in-process stand-in that answers
at once.  Used by ``bench/metrics_overhead.py`` (run it, not this)."""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import tempfile
import time
from collections.abc import AsyncGenerator
from typing import Any

import msgspec

from gateway.app import create_app
from gateway.ops import logs
from gateway.settings import load_settings
from tiers import (
    Capabilities,
    Event,
    Finished,
    Generation,
    Health,
    Modality,
    Started,
    TextDelta,
    TierState,
    Usage,
)

BODY = msgspec.json.encode(
    {"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
)


class InstantTier:
    name = "cloud"
    capabilities = Capabilities(frozenset({Modality.TEXT}), 2048, "instant")

    def state(self) -> TierState:
        return TierState("cloud", Health.READY)

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        yield Started(model="instant")
        yield TextDelta("fake answer")
        yield Finished("stop", Usage(3, 2))


async def lifespan(app: Any) -> tuple[asyncio.Queue[dict[str, str]], asyncio.Task[None]]:
    inbox: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    ready = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "lifespan.startup.complete":
            ready.set()

    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, send))
    await asyncio.wait_for(ready.wait(), 60)
    return inbox, task


async def request_once(app: Any, path: str = "/v1/chat/completions", body: bytes = BODY) -> int:
    status = 0
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


def measure(variants: dict[str, str], rounds: int = 5, requests: int = 2000) -> dict[str, float]:
    """Median CPU microseconds per request for each ``[observability]`` variant, rounds interleaved."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    apps: dict[str, Any] = {}
    samples: dict[str, list[float]] = {name: [] for name in variants}
    devnull = open(os.devnull, "w")  # noqa: SIM115 (closed below)

    async def run() -> None:
        root.handlers[:] = [logs.handler("text", devnull)]
        lifespans = []
        for name, obs in variants.items():
            data = tempfile.mkdtemp(prefix="tiergate-asgi-ab-")
            overrides = {"auth.open_mode": True, "cache.enabled": False, "ledger.enabled": False}
            for line in obs.splitlines():
                key, _, value = line.partition("=")
                overrides[f"observability.{key.strip()}"] = msgspec.json.decode(value.strip())
            settings = load_settings(environ={}, data_dir=data, **overrides)
            apps[name] = create_app(settings, tiers={"cloud": InstantTier()})
            lifespans.append(await lifespan(apps[name]))
        for _ in range(rounds):
            for name, app in apps.items():
                fmt = variants[name]
                root.handlers[:] = [logs.handler("text" if '"text"' in fmt else "json", devnull)]
                root.setLevel(logging.INFO)
                for _ in range(200):
                    await request_once(app)
                started = time.process_time()
                for _ in range(requests):
                    assert await request_once(app) == 200
                samples[name].append((time.process_time() - started) / requests * 1e6)
        for inbox, task in lifespans:
            await inbox.put({"type": "lifespan.shutdown"})
            await asyncio.wait_for(task, 30)

    try:
        asyncio.run(run())
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
        devnull.close()
    return {name: statistics.median(values) for name, values in samples.items()}
