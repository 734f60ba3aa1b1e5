"""What one generation costs the gateway's CPU on a provider tier (httpx, tiers/cloud/provider/) against
the same generation on a vLLM-pool tier (its own HTTP/1.1 client, tiers/cloud/_http.py): the tier's
whole path (request body, the call, reading the answer as events), JSON and streamed.

Method: ``bench/upstream.py`` (the fast OpenAI stand-in, plain HTTP/1.1, a fixed three-token answer)
on core 1; this process on core 0 runs sequential generations through each tier in turn, rounds
interleaved, and reads its own CPU time (``time.process_time``) per generation; the stand-in's CPU is
not counted. TLS is left out on both sides (the pool's replicas are plain HTTP on a private network;
a provider's TLS adds its record encryption on top). The table shows the median over ``--rounds``.

    .venv/bin/python -m bench.provider_call [--requests 2000] [--rounds 3]

Prints a table and writes bench/results/provider_call.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
import msgspec
import uvloop

from bench.overhead import free_port
from tiers import Generation, Health, Tier, collect
from tiers.cloud import CloudConfig, VLLMPool
from tiers.cloud.provider import ProviderConfig, ProviderTier

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "provider_call.json"
MESSAGES = [{"role": "user", "content": "hi"}]


async def measure(requests: int, rounds: int, base: str) -> dict[str, float]:
    pool = VLLMPool(CloudConfig(urls=[base], model="bench", max_retries=0), name="pool")
    provider = ProviderTier(
        "provider", msgspec.convert({"base_url": f"{base}/v1", "model": "bench"}, ProviderConfig)
    )
    tiers: dict[str, Tier] = {"vLLM pool": pool, "provider": provider}
    for tier in tiers.values():
        await tier.start()
    deadline = time.monotonic() + 30
    while pool.state().health is not Health.READY:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pool did not become ready: {pool.state().detail}")
        await asyncio.sleep(0.1)
    samples: dict[str, list[float]] = {}
    try:
        for _ in range(rounds):
            for name, tier in tiers.items():
                for stream in (False, True):
                    gen = Generation(messages=MESSAGES, max_tokens=8, stream=stream)
                    for _ in range(200):  # warm: connection open, code paths hot
                        await collect(tier.generate(gen))
                    started = time.process_time()
                    for _ in range(requests):
                        await collect(tier.generate(gen))
                    cpu = (time.process_time() - started) / requests * 1e6
                    samples.setdefault(f"{name}, {'stream' if stream else 'JSON'}", []).append(cpu)
    finally:
        for tier in tiers.values():
            await tier.aclose()
    return {name: round(statistics.median(v), 1) for name, v in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    port = free_port()
    upstream = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "bench/upstream.py", str(port)], cwd=ROOT
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        os.sched_setaffinity(0, {0})
        cpu_us = uvloop.run(measure(args.requests, args.rounds, base))
    finally:
        upstream.terminate()
        upstream.wait(10)
    print(f"{'tier, answer':<22} {'CPU µs/generation':>18}")
    for name, us in cpu_us.items():
        print(f"{name:<22} {us:>18.1f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {"method": __doc__, "args": vars(args), "cpu_us_per_generation": cpu_us}
    RESULTS.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
