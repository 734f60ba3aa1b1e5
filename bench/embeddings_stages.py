"""Where a one-text ``POST /v1/embeddings`` request spends its time outside the model, stage by stage.

Method
------
* The gateway's Litestar app called as an ASGI callable in this process (``bench/_asgi_ab.py``: no HTTP
  server, no client, no network), edge and cloud off, auth in open mode, the default disk cache and
  ledger on (``--off cache`` / ``--off ledger`` turn them off); all-MiniLM-L6-v2 as
  ``tiergate models export-embedding`` built it, on the in-process ONNX backend.
* One text per request, each made unique by a counter (every one a cache miss, computed and stored),
  requests back to back: the case where nothing overlaps the gateway's work.
* The pipeline's awaited stages are wrapped with timers: tokenize (with the input checks), the cache
  lookup, the model (the batcher and its worker thread), the ledger (tokens charged, the row durable),
  the whole pipeline, the whole ASGI call. ``loop CPU`` is the event loop thread's CPU time per request
  (``time.thread_time``): the gateway's own Python and C work, the model's threads not included.
* ``--repeats`` rounds of ``--requests`` requests after 30 to warm up; the table shows the median over
  rounds of each stage's median, in milliseconds. The machine is shared: read it as proportions.

    .venv/bin/python -m bench.embeddings_stages [--repeats 5] [--requests 200] [--off cache,ledger]

Prints a table and writes bench/results/embeddings_stages.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from bench._asgi_ab import lifespan, request_once
from bench.embeddings import write_results
from gateway.app import create_app
from gateway.ops import logs
from gateway.pipeline import record
from gateway.pipeline.endpoints.embeddings import stages
from gateway.settings import load_settings
from tiers.embedding import OnnxEmbedder

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "embeddings_stages.json"
TIMED = {
    "tokenize": (stages.EmbeddingPipeline, "_tokens"),
    "cache lookup": (stages.EmbeddingPipeline, "_get_many"),
    "model": (OnnxEmbedder, "embed"),
    "ledger": (record.Recorder, "ended"),
    "pipeline": (stages.EmbeddingPipeline, "run"),
}
_counter = itertools.count()


def timing(samples: dict[str, list[float]]) -> None:
    """Wrap each stage in :data:`TIMED` so every call adds its wall milliseconds to ``samples``."""
    for name, (owner, attr) in TIMED.items():
        original = getattr(owner, attr)

        def wrapped(original: Callable[..., Awaitable[Any]], name: str) -> Callable[..., Awaitable[Any]]:
            @functools.wraps(original)
            async def timed(*args: Any, **kwargs: Any) -> Any:
                started = time.perf_counter()
                try:
                    return await original(*args, **kwargs)
                finally:
                    samples.setdefault(name, []).append((time.perf_counter() - started) * 1e3)

            return timed

        setattr(owner, attr, wrapped(original, name))


def body() -> bytes:
    text = f"The quick brown fox jumps over the lazy dog number {next(_counter)}"
    return msgspec.json.encode({"model": "all-MiniLM-L6-v2", "input": text})


async def measure(off: list[str], repeats: int, requests: int) -> dict[str, list[float]]:
    rounds: dict[str, list[float]] = {}
    samples: dict[str, list[float]] = {}
    timing(samples)
    overrides: dict[str, Any] = {"auth.open_mode": True, "edge.enabled": False, "cloud.enabled": False}
    overrides.update({f"{part}.enabled": False for part in off})
    settings = load_settings(environ={}, data_dir=tempfile.mkdtemp(prefix="bench-embed-stages-"), **overrides)
    app = create_app(settings)
    inbox, task = await lifespan(app)
    for _ in range(30):
        assert await request_once(app, "/v1/embeddings", body()) == 200
    for _ in range(repeats):
        samples.clear()
        cpu = time.thread_time()
        for _ in range(requests):
            started = time.perf_counter()
            assert await request_once(app, "/v1/embeddings", body()) == 200
            samples.setdefault("ASGI call", []).append((time.perf_counter() - started) * 1e3)
        rounds.setdefault("loop CPU", []).append((time.thread_time() - cpu) / requests * 1e3)
        for name, values in samples.items():
            rounds.setdefault(name, []).append(statistics.median(values))
    await inbox.put({"type": "lifespan.shutdown"})
    await asyncio.wait_for(task, 30)
    return rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--off", default="", help="parts to turn off: cache, ledger (comma-separated)")
    args = parser.parse_args(argv)
    off = [p for p in args.off.split(",") if p]
    logging.getLogger().handlers[:] = [logs.handler("text", open(os.devnull, "w"))]  # noqa: SIM115
    sys.setswitchinterval(0.0005)  # as gateway/tools/server.py sets it
    rounds = asyncio.run(measure(off, args.repeats, args.requests))
    table = {name: round(statistics.median(values), 3) for name, values in rounds.items()}
    print(f"{'stage':<14} {'ms (median)':>11}")
    for name, value in table.items():
        print(f"{name:<14} {value:>11.3f}")
    fields = {
        "off": off,
        "repeats": args.repeats,
        "requests_per_round": args.requests,
        "median_ms": table,
        "rounds": {k: [round(v, 3) for v in values] for k, values in rounds.items()},
    }
    write_results(RESULTS, "bench.embeddings_stages", argv, fields)
    return 0


if __name__ == "__main__":
    sys.exit(main())
