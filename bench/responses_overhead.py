"""What the Responses API adds to a request, against Chat Completions for the same request, same run.

Method: one gateway app (open mode, no cache, no ledger) over an in-process tier that answers at
once (bench/_asgi_ab.py), called as an ASGI callable, so nothing but the gateway's own work is timed:
no sockets, no processes, no model.  The same question goes as a chat request and as a Responses
request, JSON and streamed; the Responses one with ``store: false`` (the translation and framing
alone) and with ``store: true`` (the default: plus the stored response, written ahead before the
answer is sent, to the write-ahead file in the data folder and into memory, and moved into the
gateway's SQLite database in batches by a background task: gateway/accounts/held_responses.py; that
task's work runs inside the timed rounds too).  Each round times ``--requests`` sequential requests
of every variant, the variants in turn (reversed every other round); a request's figure is the wall
time per request; the table reports medians over ``--rounds``, and each variant's added microseconds
against chat is the median over rounds of (variant - chat) in the same round (goal: <= 200 us).

    python -m bench.responses_overhead --rounds 7 --requests 500

Prints a table and writes bench/results/responses_overhead.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench._asgi_ab import InstantTier, lifespan, request_once
from gateway.app import create_app
from gateway.settings import load_settings

QUESTION = "What is the capital of France?"


def _bodies() -> dict[str, tuple[str, bytes]]:
    chat = {"model": "cloud", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 8}
    responses = {"model": "cloud", "input": QUESTION, "max_output_tokens": 8}
    enc = msgspec.json.encode
    return {
        "chat": ("/v1/chat/completions", enc(chat)),
        "responses store=false": ("/v1/responses", enc({**responses, "store": False})),
        "responses store=true": ("/v1/responses", enc(responses)),
        "chat stream": ("/v1/chat/completions", enc({**chat, "stream": True})),
        "responses stream store=false": ("/v1/responses", enc({**responses, "store": False, "stream": True})),
        "responses stream store=true": ("/v1/responses", enc({**responses, "stream": True})),
    }


async def _measure(rounds: int, requests: int) -> dict[str, list[float]]:
    data = tempfile.mkdtemp(prefix="tiergate-responses-bench-")
    overrides = {"auth.open_mode": True, "cache.enabled": False, "ledger.enabled": False}
    settings = load_settings(environ={}, data_dir=data, **overrides)
    app = create_app(settings, tiers={"cloud": InstantTier()})
    inbox, task = await lifespan(app)
    bodies = _bodies()
    samples: dict[str, list[float]] = {name: [] for name in bodies}
    try:
        for path, body in bodies.values():  # warm every path
            for _ in range(100):
                assert await request_once(app, path, body) == 200
        for round_ in range(rounds):
            order = list(bodies.items()) if round_ % 2 == 0 else list(reversed(bodies.items()))
            for name, (path, body) in order:
                started = time.perf_counter()
                for _ in range(requests):
                    await request_once(app, path, body)
                samples[name].append((time.perf_counter() - started) / requests * 1e6)
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(task, 30)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--out", default="bench/results/responses_overhead.json")
    args = parser.parse_args()
    samples = asyncio.run(_measure(args.rounds, args.requests))
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base_of = {name: "chat stream" if "stream" in name else "chat" for name in medians}
    baseline = {name: medians[base_of[name]] for name in medians}
    rows: list[dict[str, Any]] = []
    print(f"{'variant':<32} {'us/request':>11} {'vs chat':>9} {'added us':>9}")
    for name, value in medians.items():
        paired = zip(samples[name], samples[base_of[name]], strict=True)
        added = statistics.median(v - b for v, b in paired)
        rows.append(
            {"variant": name, "us_per_request": value, "ratio": value / baseline[name], "added_us": added}
        )
        print(f"{name:<32} {value:>11.1f} {value / baseline[name]:>9.3f} {added:>9.1f}")
    report = {
        "method": __doc__,
        "rounds": args.rounds,
        "requests": args.requests,
        "samples": samples,
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
