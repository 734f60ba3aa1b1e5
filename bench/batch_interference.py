"""Interactive latency with and without a batch running beside it, and the batch's completion time.

Method
------
* One real ``tiergate serve`` child process on the embedded defaults' edge tier (llama.cpp, SmolLM2-135M;
  the cloud off, so every request and every line runs on the same engine), the result cache bypassed
  (``Cache-Control: no-cache``), the ledger on, as shipped.
* Interactive load: Poisson arrivals at ``--rate`` requests/s for ``--duration`` seconds of a short chat
  request (``--max-tokens``, temperature 0) on the edge, from ``bench.loadgen`` (open loop: a slow
  answer does not hold the next arrival back); seeded, so every phase gets the same arrival times.
* Rounds (``--repeats``) in one run, on one gateway: ``alone`` (no batch), ``with batch`` (a fresh
  batch of ``--lines`` chat lines, ``--line-tokens`` each, created through the Files and Batch APIs
  just before the phase starts), then, once that batch has finished, ``alone`` again, which is also
  the next round's ``alone``.  A round's ratio is its ``with batch`` over the mean of the ``alone``
  phases on either side of it (the drift of a shared machine shows as their difference), at p50 and
  p99; the run reports the median of the rounds' ratios, and the ratio of all ``with batch`` samples
  pooled over all ``alone`` samples pooled (a p99 from more samples).  The issue's bar is 1.15x.
* The batch's completion time runs from ``batches.create`` to the first poll that reads it
  ``completed``; ``batch ran through the phase`` says whether it was still running when the
  ``with batch`` phase ended (if not, the phase measured less interference than there was to measure:
  use more lines).

    .venv/bin/python -m bench.batch_interference [--lines 2000] [--rate 2] [--duration 60]
                                                 [--max-tokens 8] [--line-tokens 16] [--concurrency 2]
                                                 [--repeats 1]

Prints a table and writes bench/results/batch_interference.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import openai

from bench.loadgen import Sample
from bench.loadgen import run as load

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "batch_interference.json"
TIERGATE = str(Path(sys.executable).with_name("tiergate"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(folder: Path, concurrency: int) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    config = folder / "tiergate.toml"
    config.write_text(
        f'data_dir = "{folder / "data"}"\n[cloud]\nenabled = false\n[batch]\nconcurrency = {concurrency}\n'
    )
    process = subprocess.Popen(
        [TIERGATE, "serve", "--config", str(config), "--port", str(port)],
        stdout=(folder / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the gateway exited: {(folder / 'gateway.log').read_text()[-3000:]}")
        try:
            tiers = httpx.get(f"{url}/readyz", timeout=5).json().get("tiers", [])
            if any(t["name"] == "edge" and t["health"] == "ready" for t in tiers):
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    key = json.loads((folder / "data" / "initial-credentials.json").read_text())["tenant_key"]
    return process, url, key


def percentiles(samples: list[Sample]) -> dict[str, Any]:
    ok = sorted(s.total * 1000 for s in samples if s.ok)
    failed = sum(not s.ok for s in samples)
    if not ok:
        return {"n": 0, "failed": failed}
    p99 = ok[min(len(ok) - 1, int(0.99 * len(ok)))]
    return {"n": len(ok), "failed": failed, "p50_ms": statistics.median(ok), "p99_ms": p99}


def phase(url: str, key: str, args: argparse.Namespace) -> list[Sample]:
    body = {
        "model": "edge",
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": args.max_tokens,
        "temperature": 0,
    }
    headers = {"Authorization": f"Bearer {key}", "Cache-Control": "no-cache"}
    samples, errors = load(
        f"{url}/v1/chat/completions",
        json.dumps(body).encode(),
        rate=args.rate,
        duration=args.duration,
        headers=headers,
        poisson=True,
    )
    if errors:
        raise SystemExit(f"{errors} connection errors in a phase")
    return samples


def batch_file(args: argparse.Namespace, first: int) -> bytes:
    """``args.lines`` chat lines about tickets ``first``, ``first + 1``, ...: each round's its own, so
    no line is answered from the result cache by an earlier round's."""
    lines = []
    for i in range(first, first + args.lines):
        body = {
            "model": "tiergate-auto",
            "messages": [{"role": "user", "content": f"Summarise support ticket number {i} in one line."}],
            "max_tokens": args.line_tokens,
            "temperature": 0,
        }
        lines.append(
            json.dumps({"custom_id": f"t{i}", "method": "POST", "url": "/v1/chat/completions", "body": body})
        )
    return ("\n".join(lines) + "\n").encode()


def run_batch(
    client: openai.OpenAI, url: str, key: str, args: argparse.Namespace, first: int
) -> tuple[list[Sample], Any]:
    """A ``with batch`` phase, then the batch waited for: its samples and the batch's summary."""
    uploaded = client.files.create(file=("bench.jsonl", batch_file(args, first)), purpose="batch")
    created = time.monotonic()
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    samples = phase(url, key, args)
    ran_through = client.batches.retrieve(batch.id).status == "in_progress"
    while (batch := client.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        time.sleep(0.5)
    took = time.monotonic() - created
    counts = batch.request_counts
    return samples, {
        "status": batch.status,
        "completed": counts.completed if counts else None,
        "failed": counts.failed if counts else None,
        "seconds": took,
        "lines_per_s": args.lines / took,
        "ran_through_the_phase": ran_through,
    }


def ratios(with_batch: dict[str, Any], alone: list[dict[str, Any]]) -> dict[str, float]:
    return {
        f"ratio_{k}": with_batch[f"{k}_ms"] / statistics.mean(a[f"{k}_ms"] for a in alone)
        for k in ("p50", "p99")
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=2000, help="lines in each background batch")
    parser.add_argument("--rate", type=float, default=2.0, help="interactive requests per second (Poisson)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of each phase")
    parser.add_argument("--max-tokens", type=int, default=8, help="an interactive request's max_tokens")
    parser.add_argument("--line-tokens", type=int, default=16, help="a batch line's max_tokens")
    parser.add_argument("--concurrency", type=int, default=2, help="batch.concurrency")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of (with batch, alone)")
    args = parser.parse_args()

    load_before = os.getloadavg()
    alone: list[list[Sample]] = []
    with_batch: list[list[Sample]] = []
    batches: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="batch-bench-") as tmp:
        process, url, key = start(Path(tmp), args.concurrency)
        try:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)
            for _ in range(5):  # warm the engine and the router
                client.chat.completions.create(
                    model="edge", messages=[{"role": "user", "content": "Hi."}], max_tokens=4
                )
            alone.append(phase(url, key, args))
            for i in range(args.repeats):
                samples, summary = run_batch(client, url, key, args, i * args.lines)
                with_batch.append(samples)
                batches.append(summary)
                alone.append(phase(url, key, args))
        finally:
            process.terminate()
            process.wait(60)
    alone_p = [percentiles(a) for a in alone]
    with_p = [percentiles(w) for w in with_batch]
    rounds = [
        {"with_batch": w, "alone_before": alone_p[i], "alone_after": alone_p[i + 1], "batch": batches[i]}
        | ratios(w, alone_p[i : i + 2])
        for i, w in enumerate(with_p)
    ]
    pooled_alone = percentiles([s for a in alone for s in a])
    pooled_with = percentiles([s for w in with_batch for s in w])
    pooled = {"alone": pooled_alone, "with_batch": pooled_with} | ratios(pooled_with, [pooled_alone])
    result = {
        "args": vars(args),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "load": [load_before, os.getloadavg()],
        "rounds": rounds,
        "median_ratio_p50": statistics.median(r["ratio_p50"] for r in rounds),
        "median_ratio_p99": statistics.median(r["ratio_p99"] for r in rounds),
        "pooled": pooled,
        "method": __doc__,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"interactive: Poisson {args.rate}/s for {args.duration:g} s a phase, max_tokens {args.max_tokens}")
    print(f"{'phase':<16}{'n':>6}{'failed':>8}{'p50 ms':>10}{'p99 ms':>10}")
    names = ["alone"] + [n for i in range(len(with_p)) for n in (f"with batch {i + 1}", "alone")]
    phases = [alone_p[0]] + [p for i in range(len(with_p)) for p in (with_p[i], alone_p[i + 1])]
    for name, p in zip(names, phases, strict=True):
        print(f"{name:<16}{p['n']:>6}{p['failed']:>8}{p['p50_ms']:>10.0f}{p['p99_ms']:>10.0f}")
    for i, r in enumerate(rounds, 1):
        b = r["batch"]
        print(
            f"round {i}: with batch / alone p50 x{r['ratio_p50']:.2f}, p99 x{r['ratio_p99']:.2f}; batch of "
            f"{args.lines} lines {b['status']} in {b['seconds']:.1f} s ({b['lines_per_s']:.2f} lines/s, "
            f"ran through the phase: {b['ran_through_the_phase']})"
        )
    print(
        f"median of rounds: p50 x{result['median_ratio_p50']:.2f}, p99 x{result['median_ratio_p99']:.2f}; "
        f"pooled: p50 x{pooled['ratio_p50']:.2f}, p99 x{pooled['ratio_p99']:.2f} "
        f"({pooled_with['n']} with, {pooled_alone['n']} alone)"
    )


if __name__ == "__main__":
    main()
