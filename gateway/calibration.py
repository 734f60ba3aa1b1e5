"""``tiergate calibrate``: a generated probe workload sent to each tier through a running gateway.

Each probe is pinned to one tier (``model: edge`` / ``cloud``) and bypasses the result cache,
so the gateway's router observes it exactly as it observes live traffic (the same features,
the same live tier state); then ``POST /admin/api/router/refit`` fits and saves the predictors.
The workload mixes prompt lengths, output lengths, streaming and a few levels of concurrency,
so the models see the queueing they must predict.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from dataclasses import dataclass
from typing import Any

import httpx

_TEXT = (
    "the gateway routes each request to an edge model or a cloud pool and learns how long every "
    "tier takes so that it can meet each tenant's latency objective at the lowest cost while "
    "keeping the quality the request needs"
)


@dataclass(frozen=True, slots=True)
class Probe:
    prompt: str
    max_tokens: int
    stream: bool


def probe_workload(count: int, seed: int = 1) -> list[Probe]:
    """Prompts of ~10 to ~600 tokens asking for long or one-line answers, max_tokens 8 to 256,
    half streamed."""
    rng = random.Random(seed)
    vocabulary = _TEXT.split()
    probes = []
    for i in range(count):
        words = rng.choice((8, 30, 120, 450))
        text = " ".join(rng.choice(vocabulary) for _ in range(words))
        if rng.random() < 0.5:  # answers that run to max_tokens, and answers that stop early
            prompt = f"Probe {i}. Continue this text for as long as you are allowed: {text}"
        else:
            prompt = f"Probe {i}. In one short sentence, what is the main word of this text? {text}"
        probes.append(Probe(prompt, rng.choice((8, 32, 96, 192, 256)), rng.random() < 0.5))
    return probes


async def _send(client: httpx.AsyncClient, tier: str, probe: Probe) -> dict[str, Any]:
    body = {
        "model": tier,
        "messages": [{"role": "user", "content": probe.prompt}],
        "max_tokens": probe.max_tokens,
        "stream": probe.stream,
        "temperature": 0.8,
    }
    started = time.perf_counter()
    status = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        status = resp.status_code
        async for _ in resp.aiter_bytes():
            pass
    return {"tier": tier, "status": status, "seconds": time.perf_counter() - started}


async def calibrate(
    url: str,
    key: str,
    admin_key: str,
    tiers: list[str],
    per_tier: int,
    concurrency: tuple[int, ...] = (1, 2, 3),
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Send ``per_tier`` probes to each tier (in rounds at each concurrency), then refit."""
    headers = {"Authorization": f"Bearer {key}", "Cache-Control": "no-store"}
    results: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout_s) as client:
        for tier in tiers:
            probes = probe_workload(per_tier, seed=zlib.crc32(tier.encode()))
            i = 0
            while i < len(probes):
                width = concurrency[(i // max(concurrency)) % len(concurrency)]
                batch = probes[i : i + width]
                results += await asyncio.gather(*(_send(client, tier, p) for p in batch))
                i += width
        admin = {"Authorization": f"Bearer {admin_key}"}
        resp = await client.post("/admin/api/router/refit", headers=admin)
        resp.raise_for_status()
        snapshot: dict[str, Any] = resp.json()
    ok = sum(1 for r in results if r["status"] == 200)
    return {"sent": len(results), "answered": ok, "router": snapshot}
