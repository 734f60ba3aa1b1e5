"""What one upstream request costs the gateway's CPU, per HTTP client: the cloud tier's own
(``tiers/cloud/_http.py``), aiohttp and httpx.

Method: ``bench/upstream.py`` (the fast stand-in) on core 1; this process on core 0 sends
sequential non-streaming POSTs over one keep-alive connection with each client in turn, rounds
interleaved, and reads its own CPU time (``time.process_time``) per request; the stand-in's
CPU is not counted.  The table shows the median over ``--rounds``.

    .venv/bin/python -m bench.upstream_client [--requests 3000] [--rounds 5]

Prints a table and writes bench/results/upstream_client.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import httpx
import uvloop

from bench.overhead import free_port
from tiers.cloud._http import HttpPool

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "upstream_client.json"
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}).encode()
HEADERS = {"Content-Type": "application/json"}


async def measure(requests: int, rounds: int, url: str) -> dict[str, float]:
    pool = HttpPool()
    session = aiohttp.ClientSession()
    client = httpx.AsyncClient()

    async def ours() -> None:
        resp = await pool.post(url, BODY, HEADERS)
        await resp.read()
        resp.release()

    async def with_aiohttp() -> None:
        async with session.post(url, data=BODY, headers=HEADERS) as resp:
            await resp.read()

    async def with_httpx() -> None:
        await client.post(url, content=BODY, headers=HEADERS)

    clients: dict[str, Callable[[], Awaitable[None]]] = {
        "tiergate _http": ours,
        "aiohttp": with_aiohttp,
        "httpx": with_httpx,
    }
    samples: dict[str, list[float]] = {name: [] for name in clients}
    try:
        for _ in range(rounds):
            for name, one in clients.items():
                for _ in range(200):  # warm: connection open, code paths hot
                    await one()
                started = time.process_time()
                for _ in range(requests):
                    await one()
                samples[name].append((time.process_time() - started) / requests * 1e6)
    finally:
        await pool.aclose()
        await session.close()
        await client.aclose()
    return {name: round(statistics.median(v), 1) for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    port = free_port()
    upstream = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "bench/upstream.py", str(port)], cwd=ROOT
    )
    try:
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.post(url, content=BODY, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        os.sched_setaffinity(0, {0})
        cpu_us = uvloop.run(measure(args.requests, args.rounds, url))
    finally:
        upstream.terminate()
        upstream.wait(10)
    base = cpu_us["tiergate _http"]
    print(f"{'client':<16} {'CPU µs/request':>15} {'vs ours':>8}")
    for name, us in cpu_us.items():
        print(f"{name:<16} {us:>15.1f} {us / base:>7.1f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {"method": __doc__, "args": vars(args), "cpu_us_per_request": cpu_us}
    RESULTS.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
