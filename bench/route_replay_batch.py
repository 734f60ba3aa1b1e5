"""The route replay at a higher arrival rate, the serial edge against the batched one, same command.

Method
------
* Everything is ``bench.route_replay``'s (its docstring): the embedded defaults (edge llama.cpp
  SmolLM2-135M in-process, the local vLLM on the CPU as the cloud, result cache off), each engine on
  its half of the cores, ``tiergate calibrate`` first (``--calibrate`` probes per tier), the same
  seeded mixed trace (short chats, long generations, hard questions, images, video; half streamed;
  Poisson arrivals at ``--rate``), the same objective (total time <= ``--slo-ms`` at p95, every
  request) and the same per-strategy figures (cost from the ledger, SLO attainment, edge share, p95).
* What differs: one gateway per edge setting in ``--edge-max-sequences`` (default ``1,4``: the serial
  engine, then the batched one at the default ``edge.max_sequences``), started, calibrated and
  replayed one after the other in this one command, with the same trace.  ``vs always-cloud`` is
  each strategy's cost against always-cloud's *in the same gateway* (same edge, same calibration).
* The rate (``--rate 1.0`` in the current run, docs/performance.md) is where the serial edge alone
  cannot carry the edge-capable requests and the batched one can: in the 0.5/s replay the edge's
  requests held it ~1.3 s each (the medians per kind, weighted by the mix), so one serial instance
  serves ~0.8 a second; at 1.0/s the short chats and long generations (70% of the trace) offer it
  ~0.9-1.1 s of work a second (saturated; always-edge, which also sends it the hard questions, more
  so), while the batched edge, at 1.6x the serial tokens/s with 2-4 sequences (``bench.edge_batch``),
  has room.  The images, video and hard questions (30%, ~0.3/s) need the cloud, which keeps up at
  0.5/s alone: so at 1.0/s a router that keeps the text on a batched edge can meet the objective,
  while always-cloud (1.0/s on vLLM's one core) cannot.  0.8/s would leave the serial edge barely
  loaded enough to tell the settings apart; at 1.2/s and 1.5/s the cloud fell minutes behind on
  what the strategies sent it (docs/performance.md's history line).
* The objective stays one for every request (15 s at p95, total time): every strategy is scored
  against the same one.  A per-kind objective would excuse the strategies that overload a tier.
* The learned strategy runs last in each gateway (``--strategies always-cloud,always-edge,learned``),
  as in ``bench.route_replay``: it has learned online from the baselines' requests at this rate
  (both tiers saturated), not only from the calibration's few probes.
* ``predicted_vs_actual``: per strategy and tier, the router's median predicted total (made when it
  routed the request, ``X-Tiergate-Predicted``) beside the total the client saw: whether the router
  saw each tier's wait and slowdown as they were.
* After each gateway's replays the edge's readiness detail (``/readyz``) is kept: it says how many
  sequences the batch sustains, as measured during the run.
* ``timeline`` (per strategy): ``/readyz`` read every 0.5 s during the replay, per tier
  ``[seconds since the replay began, in_flight, queued, slots]``: where a request's time went
  (waiting for a slot that the measured count took away, or in a batch that slowed) can be read
  beside its row.

    flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.route_replay_batch \\
        [--requests 60] [--rate 1.0] [--slo-ms 15000] [--calibrate 8] [--edge-max-sequences 1,4] \\
        [--strategies always-cloud,always-edge,learned]

Prints a table and writes bench/results/route_replay_batch.json.  From a git worktree other than
the checkout installed in the venv, prefix ``PYTHONPATH=$PWD``: the gateway is started with the
venv's ``tiergate`` script, which otherwise imports the installed checkout's code, not this one's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.route_replay import (
    _predicted,
    calibrate,
    generate,
    replay,
    start_gateway,
    trace_parser,
    with_difficulty,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "route_replay_batch.json"
STRATEGIES = ("always-cloud", "always-edge", "learned")  # the learned one last: it learns from the others


def run_one(
    run: dict[str, Any],
    trace: list[dict[str, Any]],
    strategies: list[str],
    args: argparse.Namespace,
    save: Callable[[], None],
) -> None:
    """Start a gateway with ``edge.max_sequences = run["max_sequences"]``, calibrate, replay each
    strategy; into ``run``, saved after each strategy (a run cut short keeps what it measured)."""
    max_sequences = run["max_sequences"]
    tmp = Path(tempfile.mkdtemp(prefix=f"tiergate-replay-seq{max_sequences}-"))
    proc, url, keys = start_gateway(tmp, extra=f"[edge]\nmax_sequences = {max_sequences}\n")
    rows: list[dict[str, Any]] = run.setdefault("rows", [])
    try:
        if args.calibrate:
            started = time.monotonic()
            calibration = asyncio.run(calibrate(url, keys, args.calibrate))
            calibration["seconds"] = time.monotonic() - started
            run["calibration"] = calibration
            print(f"max_sequences {max_sequences}: calibrated in {calibration['seconds']:.0f} s", flush=True)
        for strategy in strategies:
            with Timeline(url) as timeline:
                row = asyncio.run(replay(url, keys, trace, strategy, args.slo_ms))
            row["timeline"] = timeline.samples
            row["predicted_vs_actual"] = predicted_vs_actual(row["results"])
            rows.append(row)
            run["edge_ready"] = _edge_ready(url)
            save()
            print(
                f"max_sequences {max_sequences} {strategy}: cost ${row['cost_usd']:.6f}, "
                f"SLO {row['slo_attainment']}, share {row['share']}, p95 {row['p95_s']}, "
                f"statuses {row['statuses']}, load {row['load']}",
                flush=True,
            )
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


class Timeline:
    """Reads ``/readyz`` every ``every_s`` on a thread while the block runs: per tier, samples of
    ``[seconds since start, in_flight, queued, slots]``."""

    def __init__(self, url: str, every_s: float = 0.5) -> None:
        self._url, self._every = url, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.samples: dict[str, list[list[float]]] = {}

    def __enter__(self) -> Timeline:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.wait(self._every):
                try:
                    tiers = client.get(f"{self._url}/readyz").json().get("tiers", [])
                except (httpx.HTTPError, ValueError):
                    continue
                at = round(time.monotonic() - self._started, 2)
                for t in tiers:
                    sample = [at, t.get("in_flight", 0), t.get("queued", 0), t.get("slots", 0)]
                    self.samples.setdefault(t["name"], []).append(sample)


def predicted_vs_actual(results: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """Per tier, over the requests it answered: the router's median predicted total (made when it
    routed them, ``X-Tiergate-Predicted``) beside the total the client saw, both medians, and the
    median of actual / predicted: whether the router saw a tier's wait and slowdown as they were."""
    out: dict[str, dict[str, float | int]] = {}
    for tier in sorted({r["tier"] for r in results if r["status"] == 200 and r.get("tier")}):
        pairs = [
            (p, r["seconds"])
            for r in results
            if r["status"] == 200 and r.get("tier") == tier
            if (p := _predicted(r.get("predicted") or "", "total"))
        ]
        if pairs:
            out[tier] = {
                "n": len(pairs),
                "predicted_p50_s": statistics.median(p for p, _ in pairs),
                "actual_p50_s": statistics.median(a for _, a in pairs),
                "ratio_p50": statistics.median(a / p for p, a in pairs),
            }
    return out


def _edge_ready(url: str) -> dict[str, Any]:
    """The edge's entry in ``/readyz`` (its ``slots``: what its batch was measured to sustain)."""
    ready = httpx.get(f"{url}/readyz", timeout=30).json()
    return next((t for t in ready.get("tiers", []) if t["name"] == "edge"), {})


def table(runs: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    lines = [
        "| edge.max_sequences | strategy | cost USD | vs always-cloud | SLO attained | p50 / p95 s "
        "| edge share | statuses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        cloud = next((r["cost_usd"] for r in run.get("rows", []) if r["strategy"] == "always-cloud"), None)
        for r in run.get("rows", []):
            change = None if not cloud else r["cost_usd"] / cloud - 1
            lines.append(
                f"| {run['max_sequences']} | {r['strategy']} | {r['cost_usd']:.6f} | {f(change, '+.1%')} "
                f"| {f(r['slo_attainment'], '.0%')} | {f(r['p50_s'], '.1f')} / {f(r['p95_s'], '.1f')} "
                f"| {f(r['share'].get('edge', 0.0), '.0%')} | {r['statuses']} |"
            )
    lines += [
        "",
        "| edge.max_sequences | strategy | tier | n | predicted total p50 s | actual p50 s "
        "| actual / predicted p50 |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for r in run.get("rows", []):
            for tier, d in r.get("predicted_vs_actual", {}).items():
                lines.append(
                    f"| {run['max_sequences']} | {r['strategy']} | {tier} | {d['n']} "
                    f"| {d['predicted_p50_s']:.1f} | {d['actual_p50_s']:.1f} | {d['ratio_p50']:.1f} |"
                )
    return "\n".join(lines)


def main() -> None:
    parser = trace_parser(__doc__, requests=60, rate=1.0)
    parser.add_argument("--calibrate", type=int, default=8, help="probes per tier (0: none)")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--edge-max-sequences", default="1,4", help="one gateway per value, in this order")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    trace = with_difficulty(generate(args.requests, args.rate, args.seed))
    strategies = args.strategies.split(",")
    started = time.monotonic()
    runs: list[dict[str, Any]] = []

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "method": __doc__,
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "seconds": time.monotonic() - started,
            "trace_kinds": {
                k: sum(1 for e in trace if e["kind"] == k) for k in sorted({e["kind"] for e in trace})
            },
            "runs": runs,
        }
        args.out.write_text(json.dumps(document, indent=1))

    for n in args.edge_max_sequences.split(","):
        runs.append({"max_sequences": int(n)})
        run_one(runs[-1], trace, strategies, args, save)
    print(table(runs))
    print(f"{time.monotonic() - started:.0f} s in all")
    save()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
