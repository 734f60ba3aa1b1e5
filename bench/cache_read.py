"""The result cache's read on the event loop against a hop to the store's thread: CPU per chat
request, a miss and a hit, both ways in one run.

Method
------
* The real app (``gateway.app.create_app``) in this process with its default settings (diskcache
  result cache on, ledger on, key auth), a temporary data folder, the tiers replaced by stand-ins
  that answer at once (``bench/_asgi_ab.py``), the learner's background refit held; driven as an
  ASGI callable (``bench/request_trace.py``'s ``call``), one request at a time, so what is measured
  is the gateway's own work per request, not a server's or a client's.
* Two ways of reading, alternated round by round on the one app: ``loop`` is
  :meth:`cache.DiskStore.get` as it is (a second diskcache handle read on the event loop, a lock
  waited for at most 5 ms); ``thread`` is the read it replaced, ``run_in_executor`` on the store's
  one worker thread and back (set in for the round by replacing the method on the class).  Writes
  go to the thread either way.
* Each round and way: ``--requests`` new questions to the ``cloud`` stand-in, ``temperature: 0``
  (cached), non-streamed: first each once (``miss``: a read that finds nothing, the tier, a write),
  then each again (``hit``: a read that finds the answer, no tier).  CPU is
  ``time.process_time()`` around the requests (every thread of the process), divided by the
  requests.  ``--warmup`` requests first, not measured.
* The table gives each way's median over ``--rounds`` with the range, and loop / thread: the
  median of the per-round ratios (round i against round i) with their range.

    .venv/bin/python -m bench.cache_read [--rounds 7] [--requests 500]

Prints a table and writes bench/results/cache_read.json (``--output``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from bench._asgi_ab import InstantTier, lifespan
from bench.request_trace import InstantEdge, body, call, commit
from cache import DiskStore

RESULTS = Path(__file__).resolve().parent / "results" / "cache_read.json"
KINDS = ("miss", "hit")

Read = Callable[[DiskStore, str], Coroutine[Any, Any, bytes | None]]


async def on_the_thread(store: DiskStore, key: str) -> bytes | None:
    """The read before: a hop to the store's worker thread and back."""
    return await store._run(store._get, key)


WAYS: dict[str, Read] = {"loop": DiskStore.get, "thread": on_the_thread}


async def measure(rounds: int, requests: int, warmup: int) -> dict[str, dict[str, list[float]]]:
    from gateway.app import create_app
    from gateway.settings import load_settings

    data = Path(tempfile.mkdtemp(prefix="tiergate-cache-read-"))
    settings = load_settings(environ={}, data_dir=str(data), **{"router.predictor.refit_interval_s": 1e9})
    app = create_app(settings, tiers={"edge": InstantEdge(), "cloud": InstantTier()})
    inbox, task = await lifespan(app)
    cpu_ms: dict[str, dict[str, list[float]]] = {way: {kind: [] for kind in KINDS} for way in WAYS}
    try:
        key = json.loads((data / "initial-credentials.json").read_text())["tenant_key"]
        for i in range(warmup):
            await call(app, body(f"Warm-up question {i}?", False, "cloud"), key)
        for r in range(rounds):
            for way, read in WAYS.items():
                DiskStore.get = read  # type: ignore[method-assign]
                questions = [f"Round {r} {way}: what is {i} + {i}?" for i in range(requests)]
                for kind in KINDS:
                    started = time.process_time()
                    for question in questions:
                        status, answer = await call(app, body(question, False, "cloud"), key)
                        if status != 200:
                            raise RuntimeError(f"{way} {kind}: {status} {answer[:200]!r}")
                    cpu_ms[way][kind].append((time.process_time() - started) / requests * 1e3)
    finally:
        DiskStore.get = WAYS["loop"]  # type: ignore[method-assign]
        await inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait_for(task, 30)
    return cpu_ms


def report(cpu_ms: dict[str, dict[str, list[float]]], rounds: int, requests: int) -> dict[str, Any]:
    rows = {}
    for kind in KINDS:
        loop, thread = cpu_ms["loop"][kind], cpu_ms["thread"][kind]
        ratios = [a / b for a, b in zip(loop, thread, strict=True)]
        rows[kind] = {
            "loop_ms": statistics.median(loop),
            "thread_ms": statistics.median(thread),
            "ratio": statistics.median(ratios),
            "ratios": [min(ratios), max(ratios)],
            "loop_range_ms": [min(loop), max(loop)],
            "thread_range_ms": [min(thread), max(thread)],
        }
    return {
        "method": __doc__,
        "command": " ".join(["python -m bench.cache_read", *sys.argv[1:]]),
        "commit": commit(),
        "python": sys.version.split()[0],
        "rounds": rounds,
        "requests": requests,
        "cpu_ms": cpu_ms,
        "rows": rows,
    }


def table(result: dict[str, Any]) -> str:
    lines = [
        "| request | read on the loop (CPU ms) | hop to the thread (CPU ms) | loop / thread (round range) |",
        "|---|---|---|---|",
    ]
    for kind, row in result["rows"].items():
        lines.append(
            f"| {kind} | {row['loop_ms']:.3f} ({row['loop_range_ms'][0]:.3f}-{row['loop_range_ms'][1]:.3f}) "
            f"| {row['thread_ms']:.3f} ({row['thread_range_ms'][0]:.3f}-{row['thread_range_ms'][1]:.3f}) "
            f"| {row['ratio']:.2f} ({row['ratios'][0]:.2f}-{row['ratios'][1]:.2f}) |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=500, help="new questions per round and way")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    result = report(asyncio.run(measure(args.rounds, args.requests, args.warmup)), args.rounds, args.requests)
    print(table(result))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.output}")


if __name__ == "__main__":
    main()
