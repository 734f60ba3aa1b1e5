"""One client on the llama.cpp edge: the batched engine against the serial one, where the time goes.

Method
------
* Both tier objects in this process (``LlamaCppTier``; ``BatchedLlamaTier`` with ``max_sequences`` 8),
  ``prefix_cache_mb = 0``, the default edge threads; bench/edge.py's essay prompt (after the first
  request the prompt is in the live context / prefix slot), greedy, ``--max-tokens`` a request.
* Interleaved A/B: ``--rounds`` rounds, each one request on each tier, the order alternating; medians
  over rounds, and the median of the per-round ratio (``paired``, the steadier one on a shared machine).
* Per token: wall time, time inside ``llama_decode`` (wrapped), the sampler's ``pick``, the batched
  engine's ``_feed`` (its decode loop step, sampling included), and the rest (scheduling, hand-offs).

    .venv/bin/python -m bench.edge_solo [--rounds 8] [--max-tokens 64]

Prints the figures and writes bench/results/edge_solo.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import llama_cpp
import llama_cpp.llama_cpp as llama_lib

from bench.edge import ESSAY, machine
from tiers import Finished, Generation
from tiers.edge import EdgeConfig, LlamaCppTier, _sampling, default_threads
from tiers.edge._batch import BatchedLlamaTier

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "edge_solo.json"
spent = {"decode": 0.0, "pick": 0.0, "feed": 0.0}


def timed(name: str, call: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - started

    return wrapper


def instrument() -> None:
    decode = timed("decode", llama_lib.llama_decode)
    llama_lib.llama_decode = decode  # what Llama.eval calls
    llama_cpp.llama_decode = decode  # what the batched engine calls
    _sampling.Sampler.pick = timed("pick", _sampling.Sampler.pick)  # type: ignore[method-assign]
    BatchedLlamaTier._feed = timed("feed", BatchedLlamaTier._feed)  # type: ignore[method-assign]


async def one(tier: Any, max_tokens: int) -> dict[str, float]:
    for name in spent:
        spent[name] = 0.0
    started, tokens = time.perf_counter(), 0
    async for event in tier.generate(Generation(messages=ESSAY, max_tokens=max_tokens, temperature=0)):
        if isinstance(event, Finished):
            tokens = event.usage.completion_tokens
    wall = time.perf_counter() - started
    out = {f"{name}_ms": 1000 * v / tokens for name, v in spent.items()}
    return out | {"tokens_per_s": tokens / wall, "wall_ms": 1000 * wall / tokens}


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args(argv)
    instrument()
    threads = default_threads()
    tiers = {
        "serial": LlamaCppTier(EdgeConfig(threads=threads, max_sequences=1, prefix_cache_mb=0)),
        "batched": BatchedLlamaTier(EdgeConfig(threads=threads, max_sequences=8, prefix_cache_mb=0)),
    }
    for tier in tiers.values():
        await tier.start()
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in tiers}
    try:
        for round_ in range(args.rounds):
            for name in list(tiers) if round_ % 2 == 0 else list(tiers)[::-1]:
                runs[name].append(await one(tiers[name], args.max_tokens))
    finally:
        for tier in tiers.values():
            await tier.aclose()
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    for name, m in medians.items():
        own = m["feed_ms"] if name == "batched" else m["pick_ms"]  # the decode loop's own step
        m["rest_ms"] = m["wall_ms"] - m["decode_ms"] - own
        print(name, {k: round(v, 3) for k, v in m.items()})
    pairs = zip(runs["serial"], runs["batched"], strict=True)
    paired = statistics.median(b["tokens_per_s"] / s["tokens_per_s"] for s, b in pairs)
    print(f"batched / serial tokens/s, paired median over {args.rounds} rounds: {paired:.3f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "threads": threads,
                "rounds": args.rounds,
                "medians": medians,
                "paired": paired,
            },
            indent=2,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
