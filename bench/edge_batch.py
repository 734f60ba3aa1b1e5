"""Continuous batching on the llama.cpp edge: aggregate tokens/s and time to first token at 1, 2, 4 and 8
concurrent clients, the serial engine against the batched one, raw and through the gateway, same run.

Method
------
* One prompt (bench/edge.py's essay request, which runs past the budget), greedy, ``--max-tokens`` per
  request, SmolLM2-135M-Instruct Q4_1 (the shipped GGUF), the gateway's default edge threads
  (``default_threads()``: the cores less one) for both engines.
* Paths, each at concurrency c (c requests start together; tokens/s = all tokens / wall time of the batch;
  TTFT from the common start to each request's first text):
  - ``decode``: llama.cpp alone, no tiergate: c sequences in one unified-KV context, one ``llama_decode``
    of c tokens per step (no sampling): the ceiling batching can reach on this machine;
  - ``tier/serial`` and ``tier/batched``: the edge tier objects in this process (``LlamaCppTier``, one
    request at a time; ``BatchedLlamaTier`` with ``max_sequences`` = the largest c), via ``generate``;
  - ``http/serial`` and ``http/batched``: ``tiergate serve`` child processes (cloud off, result cache
    off, open mode) with ``edge.max_sequences`` 1 and the largest c, streamed over loopback.
* ``--repeats`` rounds, every cell once a round, serial and batched alternating; medians over rounds for
  tokens/s, percentiles over all requests for TTFT.

    .venv/bin/python -m bench.edge_batch [--repeats 3] [--max-tokens 64] [--concurrency 1,2,4,8]
                                         [--skip-http]

Prints a table and writes bench/results/edge_batch.json.
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

import httpx
import numpy as np

from bench.edge import ESSAY, Batch, GatewayProcess, http_batch, machine, tier_batch
from tiers import Tier
from tiers.edge import EdgeConfig, LlamaCppTier, default_threads
from tiers.edge._batch import BatchedLlamaTier

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "edge_batch.json"


def decode_ceiling(widths: list[int], steps: int, threads: int) -> dict[int, float]:
    """Tokens/s of bare ``llama_decode`` steps of c tokens (one per sequence), after a short prompt each."""
    import llama_cpp

    tier = BatchedLlamaTier(EdgeConfig(threads=threads, max_sequences=max(widths), prefix_cache_mb=0))
    tier._load()
    ctx, batch, mem = tier._ctx.ctx, tier._batch, tier._ctx.memory
    prompt = tier._model.tokenize(b"Write a very long essay about the history of Rome.", False, True)

    def put(j: int, token: int, pos: int, seq: int, logits: bool) -> None:
        batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = token, pos, 1, int(logits)
        batch.seq_id[j][0] = seq

    out = {}
    for width in widths:
        llama_cpp.llama_memory_clear(mem, True)
        for seq in range(width):
            for j, token in enumerate(prompt):
                put(j, token, j, seq, j == len(prompt) - 1)
            batch.n_tokens = len(prompt)
            assert llama_cpp.llama_decode(ctx, batch) == 0
        started = time.perf_counter()
        for k in range(steps):
            for seq in range(width):
                put(seq, prompt[k % len(prompt)], len(prompt) + k, seq, True)
            batch.n_tokens = width
            assert llama_cpp.llama_decode(ctx, batch) == 0
        out[width] = width * steps / (time.perf_counter() - started)
    tier._unload()
    return out


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def summarise(cells: dict[tuple[str, int], list[Batch]]) -> list[dict[str, Any]]:
    rows = []
    for (path, c), batches in cells.items():
        ttfts = [t for b in batches for t in b.ttfts]
        rows.append(
            {
                "path": path,
                "concurrency": c,
                "tokens_per_s": statistics.median(b.tokens / b.wall for b in batches),
                "ttft_p50_s": pct(ttfts, 50),
                "ttft_p99_s": pct(ttfts, 99),
                "rounds": len(batches),
                "rejected_429": sum(b.rejected for b in batches),
            }
        )
    solo = {r["path"]: r for r in rows if r["concurrency"] == 1}
    for r in rows:
        base = solo.get(r["path"])
        r["vs_one_client"] = r["tokens_per_s"] / base["tokens_per_s"] if base else None
        r["ttft_p99_vs_idle_p50"] = r["ttft_p99_s"] / base["ttft_p50_s"] if base else None
    return rows


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args(argv)
    widths = [int(c) for c in args.concurrency.split(",")]
    threads = default_threads()
    ceiling = await asyncio.to_thread(decode_ceiling, widths, 40, threads)
    print("llama_decode alone:", {c: round(v, 1) for c, v in ceiling.items()})

    tiers: dict[str, Tier] = {
        "tier/serial": LlamaCppTier(EdgeConfig(threads=threads, max_sequences=1, prefix_cache_mb=0)),
        "tier/batched": BatchedLlamaTier(
            EdgeConfig(threads=threads, max_sequences=max(widths), prefix_cache_mb=0)
        ),
    }
    for tier in tiers.values():
        await tier.start()
    gateways: dict[str, GatewayProcess] = {}
    tmp = Path(tempfile.mkdtemp(prefix="edge-batch-"))
    if not args.skip_http:
        for name, seqs in (("http/serial", 1), ("http/batched", max(widths))):
            toml = f"threads = {threads}\nmax_sequences = {seqs}\nprefix_cache_mb = 0\n"
            gateways[name] = GatewayProcess(tmp, name.replace("/", "-"), toml)
        for gateway in gateways.values():
            gateway.wait_ready()
    cells: dict[tuple[str, int], list[Batch]] = {}
    try:
        async with httpx.AsyncClient(timeout=600) as client:
            for url in (g.url for g in gateways.values()):  # one request each to warm the HTTP path
                await http_batch(client, url, 1, 4)
            for round_ in range(args.repeats):
                for c in widths:
                    order = ["serial", "batched"] if round_ % 2 == 0 else ["batched", "serial"]
                    for kind in order:
                        tier = tiers[f"tier/{kind}"]
                        cells.setdefault((f"tier/{kind}", c), []).append(
                            await tier_batch(tier, c, args.max_tokens)  # type: ignore[arg-type]
                        )
                        if gateways:
                            batch = await http_batch(client, gateways[f"http/{kind}"].url, c, args.max_tokens)
                            cells.setdefault((f"http/{kind}", c), []).append(batch)
                print(f"round {round_ + 1}/{args.repeats} done")
    finally:
        for tier in tiers.values():
            await tier.aclose()
        for gateway in gateways.values():
            gateway.stop()
    rows = summarise(dict(sorted(cells.items())))
    print(f"{'path':14} {'c':>2} {'tok/s':>7} {'x1':>5} {'ttft p50':>9} {'ttft p99':>9} {'p99/idle':>8} 429s")
    for r in rows:
        print(
            f"{r['path']:14} {r['concurrency']:>2} {r['tokens_per_s']:7.1f} {r['vs_one_client']:5.2f} "
            f"{r['ttft_p50_s']:9.3f} {r['ttft_p99_s']:9.3f} {r['ttft_p99_vs_idle_p50']:8.2f} "
            f"{r['rejected_429']}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "threads": threads,
                "max_tokens": args.max_tokens,
                "repeats": args.repeats,
                "prompt": ESSAY[0]["content"],
                "llama_decode_tokens_per_s": {str(c): v for c, v in ceiling.items()},
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
