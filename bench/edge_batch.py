"""Continuous batching on the llama.cpp edge: aggregate tokens/s and time to first token at 1, 2, 4 and 8
concurrent clients, the serial engine against the batched one, raw and through the gateway, same run.

Method
------
* Prompts (``--prompts``): ``shared``: one prompt for every request (bench/edge.py's essay request,
  which runs past the budget), so after the first a prefix slot holds all of it and a request joins with
  one token to evaluate; ``distinct``: bench/edge.py's ~290-token system prompt (shared, held by the
  slot) and each request its own ~120-token user turn (:func:`distinct_prompts`, a new one for every
  request of the run), so each request prefills its turn and idle TTFT includes a real prefill.
  Greedy, ``--max-tokens`` per request, SmolLM2-135M-Instruct Q4_1 (the shipped GGUF), the gateway's
  default edge threads (``default_threads()``: the cores less one) for both engines.  Every tier and
  gateway first answers one request of the same kind (warm, the system prompt in its slot).
* Paths, each at concurrency c (c requests start together; tokens/s = all tokens / wall time of the batch;
  TTFT from the common start to each request's first text):
  - ``decode``: llama.cpp alone, no tiergate: c sequences in one unified-KV context, one ``llama_decode``
    of c tokens per step (no sampling): the ceiling batching can reach on this machine; and the time of
    one step of 3 decode tokens alone, with a prompt chunk of each ``--chunks`` size from a fourth
    sequence (what a joining request adds to the running streams' step), and of the chunk alone
    (medians of 5): what a prompt token costs against a decode step, to size the prefill chunk;
  - ``tier/serial`` and ``tier/batched``: the edge tier objects in this process (``LlamaCppTier``, one
    request at a time; ``BatchedLlamaTier`` with ``max_sequences`` = the largest c), via ``generate``;
  - ``http/serial`` and ``http/batched``: ``tiergate serve`` child processes (cloud off, result cache
    off, open mode) with ``edge.max_sequences`` 1 and the largest c, streamed over loopback.
* ``--repeats`` rounds, every cell once a round, serial and batched alternating; medians over rounds for
  tokens/s, percentiles over all requests for TTFT.  The 1-minute load average at the start and end is
  recorded (the machine is shared).

    .venv/bin/python -m bench.edge_batch [--repeats 3] [--max-tokens 64] [--concurrency 1,2,4,8]
                                         [--prompts shared|distinct] [--engines serial,batched]
                                         [--chunks 16,32,64,128] [--skip-http] [--batch-threads N]
                                         [--n-gpu-layers auto|N]

``--n-gpu-layers`` (``edge.n_gpu_layers``, every path; ``auto`` the default) and ``--chunks ""`` (no step
costs) are what the GPU run in docs/edge.md uses.

Prints a table and writes the run under ``runs.<prompts>`` of bench/results/edge_batch.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.edge import (
    ESSAY,
    SYSTEM,
    Batch,
    GatewayProcess,
    Messages,
    gpu_layers,
    gpu_toml,
    http_batch,
    machine,
    tier_batch,
)
from tiers import Tier
from tiers._gpu import GpuLayers
from tiers.edge import EdgeConfig, LlamaCppTier, default_threads
from tiers.edge._batch import BatchedLlamaTier

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "edge_batch.json"


def decode_ceiling(
    widths: list[int], steps: int, threads: int, batch_threads: int = 0, gpu: GpuLayers = "auto"
) -> dict[int, float]:
    """Tokens/s of bare ``llama_decode`` steps of c tokens (one per sequence), after a short prompt each;
    ``batch_threads`` for the steps of more than one token (0: the edge's default)."""
    import llama_cpp

    config = EdgeConfig(
        threads=threads,
        batch_threads=batch_threads,
        max_sequences=max(widths),
        prefix_cache_mb=0,
        n_gpu_layers=gpu,
    )
    tier = BatchedLlamaTier(config)
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


# The distinct user turns (--prompts distinct): a travel request, its sentences in a different order per
# request (five of them, rotated), then the essay ask, so that every answer runs to --max-tokens.
TRIP = [
    "We are two adults and a child of seven, arriving in Lisbon by plane on a Friday evening.",
    "We would like to spend three nights in the city and then two nights somewhere by the sea.",
    "Our budget for hotels is modest, and we prefer small family-run places near public transport.",
    "The child loves trams, aquariums and anything to do with boats or old castles.",
    "One of us walks slowly after a knee operation, so steep hills are a problem for long walks.",
    "We do not want to rent a car, and we would rather take trains than long bus rides.",
    "We eat fish but no meat, and we like to have dinner early, around seven in the evening.",
    "On the last day we fly home from Porto in the afternoon, so we must reach it by noon.",
    "Please mention any museum that is free on Sunday mornings and anything closed on Mondays.",
]


TURN_SENTENCES = 5


def distinct_prompts(tag: str, count: int) -> list[Messages]:
    """``count`` chats with bench.edge's system prompt (shared, held by a prefix slot) and each its own
    user turn: a unique first line, the trip sentences rotated, the essay ask."""
    prompts = []
    for i in range(count):
        turn = (TRIP[i % len(TRIP) :] + TRIP[: i % len(TRIP)])[:TURN_SENTENCES]
        text = f"Request {tag}-{i}. " + " ".join(turn) + " Then " + ESSAY[0]["content"].lower()
        prompts.append([{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}])
    return prompts


def step_costs(
    chunks: list[int], width: int, threads: int, repeats: int = 5, gpu: GpuLayers = "auto"
) -> dict[str, float]:
    """Seconds of one bare ``llama_decode`` step: ``width`` decode tokens alone, and with a prompt chunk
    of each size in ``chunks`` from one more sequence (what a joining request adds to the others' step);
    and a chunk alone.  Medians over ``repeats``."""
    import llama_cpp

    config = EdgeConfig(threads=threads, max_sequences=width + 1, prefix_cache_mb=0, n_gpu_layers=gpu)
    tier = BatchedLlamaTier(config)
    tier._load()
    ctx, batch, mem = tier._ctx.ctx, tier._batch, tier._ctx.memory
    text = " ".join(TRIP * 4).encode()
    prompt = tier._model.tokenize(text, False, True)

    def put(token: int, pos: int, seq: int, logits: bool) -> None:
        j = batch.n_tokens
        batch.token[j], batch.pos[j], batch.n_seq_id[j], batch.logits[j] = token, pos, 1, int(logits)
        batch.seq_id[j][0] = seq
        batch.n_tokens = j + 1

    def step(decoders: int, chunk: int) -> float:
        llama_cpp.llama_memory_seq_rm(mem, -1, 64, -1)  # each decoder's context stays 64 tokens
        llama_cpp.llama_memory_seq_rm(mem, width, -1, -1)  # and the chunk's sequence starts empty
        batch.n_tokens = 0
        for seq in range(decoders):
            put(prompt[64], 64, seq, True)
        for k in range(chunk):
            put(prompt[k], k, width, k == chunk - 1)
        started = time.perf_counter()
        assert llama_cpp.llama_decode(ctx, batch) == 0
        return time.perf_counter() - started

    for seq in range(width):  # 64 tokens of context each
        batch.n_tokens = 0
        for k in range(64):
            put(prompt[k], k, seq, k == 63)
        assert llama_cpp.llama_decode(ctx, batch) == 0
    cases = [(f"decode {width}", width, 0)]
    for c in chunks:
        cases += [(f"decode {width} + chunk {c}", width, c), (f"chunk {c} alone", 0, c)]
    out = {name: statistics.median(step(d, c) for _ in range(repeats)) for name, d, c in cases}
    tier._unload()
    return out


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


async def dispatch_ttft(client: httpx.AsyncClient, url: str) -> tuple[float, float]:
    """The gateway's own ``tiergate_time_to_first_token_seconds`` for the edge (dispatch to the tier
    until its first token): the sum and count so far, from ``/metrics``."""
    text = (await client.get(f"{url}/metrics")).text
    found = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        for part in found:
            if line.startswith(f"tiergate_time_to_first_token_seconds_{part}{{") and 'tier="edge"' in line:
                found[part] = float(line.rsplit(" ", 1)[1])
    return found["sum"], found["count"]


def summarise(
    cells: dict[tuple[str, int], list[Batch]], inside: dict[tuple[str, int], list[float]]
) -> list[dict[str, Any]]:
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
                "ttft_mean_s": statistics.mean(ttfts) if ttfts else 0.0,
                # http: the gateway's dispatch-to-first-token mean; the rest of ttft_mean_s is before
                # the dispatch (the client, HTTP, the pipeline) and after it (SSE, the client reading)
                "dispatch_ttft_mean_s": statistics.mean(inside[path, c]) if inside.get((path, c)) else None,
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
    parser.add_argument("--prompts", choices=["shared", "distinct"], default="shared")
    parser.add_argument("--engines", default="serial,batched")
    parser.add_argument("--chunks", default="16,32,64,128")
    parser.add_argument(
        "--batch-threads", type=int, default=0, help="edge.batch_threads of every engine (0: its default)"
    )
    parser.add_argument("--n-gpu-layers", type=gpu_layers, default="auto", help="edge.n_gpu_layers")
    parser.add_argument(
        "--instances", type=int, default=1, help="edge.instances of the gateways (the tier objects are one)"
    )
    args = parser.parse_args(argv)
    gpu = args.n_gpu_layers
    widths = [int(c) for c in args.concurrency.split(",")]
    engines = args.engines.split(",")
    threads = default_threads()
    ceiling = await asyncio.to_thread(decode_ceiling, widths, 40, threads, 0, gpu)
    print(
        f"llama_decode alone ({threads} batch threads, the default):",
        {c: round(v, 1) for c, v in ceiling.items()},
    )
    wide = await asyncio.to_thread(decode_ceiling, widths, 40, threads, os.cpu_count() or 1, gpu)
    print(f"llama_decode alone ({os.cpu_count()} batch threads):", {c: round(v, 1) for c, v in wide.items()})
    chunks = [int(c) for c in args.chunks.split(",") if c]
    costs = await asyncio.to_thread(step_costs, chunks, 3, threads, 5, gpu) if chunks else {}
    print("one step, ms:", {k: round(1000 * v, 1) for k, v in costs.items()})
    batches = 0

    def prompts(c: int) -> list[Messages] | None:
        nonlocal batches
        batches += 1  # every batch its own user turns: no slot holds one from before
        return distinct_prompts(str(batches), c) if args.prompts == "distinct" else None

    tiers: dict[str, Tier] = {}
    if "serial" in engines:
        batch_threads = args.batch_threads
        one = EdgeConfig(
            threads=threads, max_sequences=1, prefix_cache_mb=0, batch_threads=batch_threads, n_gpu_layers=gpu
        )
        tiers["tier/serial"] = LlamaCppTier(one)
    if "batched" in engines:
        config = EdgeConfig(
            threads=threads,
            batch_threads=args.batch_threads,
            max_sequences=max(widths),
            prefix_cache_mb=0,
            n_gpu_layers=gpu,
        )
        tiers["tier/batched"] = BatchedLlamaTier(config)
    for tier in tiers.values():
        await tier.start()
    gateways: dict[str, GatewayProcess] = {}
    tmp = Path(tempfile.mkdtemp(prefix="edge-batch-"))
    if not args.skip_http:
        for name, seqs in ((f"http/{e}", 1 if e == "serial" else max(widths)) for e in engines):
            toml = f"threads = {threads}\nmax_sequences = {seqs}\nprefix_cache_mb = 0\n"
            toml += f"instances = {args.instances}\nbatch_threads = {args.batch_threads}\n{gpu_toml(gpu)}"
            gateways[name] = GatewayProcess(tmp, name.replace("/", "-"), toml)
        for gateway in gateways.values():
            gateway.wait_ready()
    cells: dict[tuple[str, int], list[Batch]] = {}
    inside: dict[tuple[str, int], list[float]] = {}
    try:
        async with httpx.AsyncClient(timeout=600) as client:
            for url in (g.url for g in gateways.values()):  # warm the HTTP path, max(c) connections open
                await http_batch(client, url, max(widths), 4, prompts(max(widths)))
            for tier in tiers.values():  # and the tiers (distinct: the system prompt is in the slot)
                await tier_batch(tier, 1, 4, prompts(1))  # type: ignore[arg-type]
            load = os.getloadavg()
            for round_ in range(args.repeats):
                for c in widths:
                    for kind in engines if round_ % 2 == 0 else engines[::-1]:
                        tier = tiers[f"tier/{kind}"]
                        cells.setdefault((f"tier/{kind}", c), []).append(
                            await tier_batch(tier, c, args.max_tokens, prompts(c))  # type: ignore[arg-type]
                        )
                        if gateways:
                            url = gateways[f"http/{kind}"].url
                            before = await dispatch_ttft(client, url)
                            batch = await http_batch(client, url, c, args.max_tokens, prompts(c))
                            cells.setdefault((f"http/{kind}", c), []).append(batch)
                            after = await dispatch_ttft(client, url)
                            if after[1] > before[1]:
                                mean = (after[0] - before[0]) / (after[1] - before[1])
                                inside.setdefault((f"http/{kind}", c), []).append(mean)
                print(f"round {round_ + 1}/{args.repeats} done")
    finally:
        for tier in tiers.values():
            await tier.aclose()
        for gateway in gateways.values():
            gateway.stop()
    rows = summarise(dict(sorted(cells.items())), inside)
    head = f"{'path':14} {'c':>2} {'tok/s':>7} {'x1':>5} {'ttft p50':>9} {'ttft p99':>9} {'p99/idle':>8}"
    print(f"{head} {'mean':>7} {'dispatch':>8} 429s")
    for r in rows:
        dispatch = "" if r["dispatch_ttft_mean_s"] is None else f"{r['dispatch_ttft_mean_s']:.3f}"
        print(
            f"{r['path']:14} {r['concurrency']:>2} {r['tokens_per_s']:7.1f} {r['vs_one_client']:5.2f} "
            f"{r['ttft_p50_s']:9.3f} {r['ttft_p99_s']:9.3f} {r['ttft_p99_vs_idle_p50']:8.2f} "
            f"{r['ttft_mean_s']:7.3f} {dispatch:>8} {r['rejected_429']}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    saved = saved if "runs" in saved else {"runs": {}}  # one entry per prompt mode, the last run of each
    saved["runs"][args.prompts] = {
        "machine": machine(),
        "load_average_1m": {"start": load[0], "end": os.getloadavg()[0]},
        "threads": threads,
        "max_tokens": args.max_tokens,
        "repeats": args.repeats,
        "prompt": ESSAY[0]["content"] if args.prompts == "shared" else distinct_prompts("r", 1)[0],
        "batch_threads": args.batch_threads or threads,
        "n_gpu_layers": gpu,
        "gateway_instances": args.instances,
        "devices": {name: tier.state().device for name, tier in tiers.items()},
        "llama_decode_tokens_per_s": {str(c): v for c, v in ceiling.items()},
        "llama_decode_tokens_per_s_batch_threads_every_core": {str(c): v for c, v in wide.items()},
        "step_seconds": costs,
        "rows": rows,
    }
    RESULTS.write_text(json.dumps(saved, indent=2) + "\n")
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
