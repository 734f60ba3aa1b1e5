"""Edge constrained decoding: tokens/s with a JSON schema vs without, and what the grammar's mask costs.

Method
------
* One prompt (an essay request that runs far past the budget), ``--max-tokens`` tokens, greedy, on the
  edge tier objects (``LlamaCppTier`` on the shipped GGUF, ``OnnxTier`` on the fp32 export when it is
  there), default threads.  ``plain``: free text.  ``json``: the same messages with ``response_format``
  ``json_schema`` ``{"essay": string of at least 4,000 characters}``, so the answer is still inside the
  string when the budget ends: both make exactly ``--max-tokens`` tokens.  The prompt's KV comes from the
  live context (same messages each time), so the rates are decoding, plus the grammar's compile for
  ``json`` (an ``LLMatcher`` per request, ~2 ms).
* Rounds: plain and json alternate, which first rotating per round, ``--repeats`` rounds; the table shows
  medians over rounds and ``json / plain`` as the median of per-round ratios (the steadier one on a
  shared machine).  Goal: json ≥ 90 % of plain.
* Mask cost: the last json answer's tokens replayed through a fresh matcher, per token: llguidance's
  ``fill_next_token_bitmask``, the bits to token flags (numpy ``unpackbits``) and the flags applied to a
  logits row (``putmask``); medians in µs, and as a share of the plain per-token time.
* ``--against REV`` (optional): plain tokens/s of the edge tier of git revision REV (``git archive`` of its
  ``tiers/`` into a temporary folder) vs this tree's, each in a child process (a model load, a warm-up and
  3 answers, median), alternating which goes first, greedy and at the default temperature (0.2, seeded),
  same prompt and length: "is free text as fast as before".

    .venv/bin/python -m bench.edge_constrained [--repeats 5] [--max-tokens 96] [--engines llamacpp,onnx]
                                               [--against c51fad3]

Prints a table and writes bench/results/edge_constrained.json.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.edge import ESSAY, ONNX_DIR, machine
from tiers import Generation, collect
from tiers.edge import EdgeConfig, LlamaCppTier, OnnxTier
from tiers.edge._decode import _Guide
from tiers.edge._grammar import grammar_of, parser_limits
from tiers.edge._sampling import _mask, allowed_tokens
from tiers.edge._serial import SerialEngineTier

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "edge_constrained.json"
ESSAY_SCHEMA = {
    "type": "object",
    "properties": {"essay": {"type": "string", "minLength": 4000}},
    "required": ["essay"],
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "essay", "schema": ESSAY_SCHEMA}}
# A child process's plain-text measurement, for --against (runs on either tree's tiers package).
PLAIN_RATE = """
import asyncio, json, sys, time
from tiers import Generation, collect
from tiers.edge import EdgeConfig, LlamaCppTier, OnnxTier
async def main(engine, onnx_dir, max_tokens, repeats, temperature):
    config = EdgeConfig() if engine == "llamacpp" else EdgeConfig(backend="onnx", onnx_model_dir=onnx_dir)
    tier = (LlamaCppTier if engine == "llamacpp" else OnnxTier)(config)
    await tier.start()
    messages = [{"role": "user", "content": "Write a very long essay about the history of Rome."}]
    rates = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        gen = Generation(messages=messages, max_tokens=max_tokens, temperature=temperature, seed=7)
        answer = await collect(tier.generate(gen))
        rates.append(answer.usage.completion_tokens / (time.perf_counter() - start))
    await tier.aclose()
    print(json.dumps(rates[1:]))
temperature = None if sys.argv[5] == "default" else float(sys.argv[5])
asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), temperature))
"""


def tier_for(engine: str) -> SerialEngineTier:
    if engine == "llamacpp":
        return LlamaCppTier(EdgeConfig())
    return OnnxTier(EdgeConfig(backend="onnx", onnx_model_dir=str(ONNX_DIR)))


async def rate(tier: SerialEngineTier, max_tokens: int, constrained: bool) -> float:
    gen = Generation(
        messages=ESSAY, max_tokens=max_tokens, temperature=0, response_format=FORMAT if constrained else None
    )
    start = time.perf_counter()
    answer = await collect(tier.generate(gen))
    wall = time.perf_counter() - start
    if answer.usage.completion_tokens != max_tokens:
        raise RuntimeError(f"{answer.usage.completion_tokens} tokens, not {max_tokens}: {answer.text!r}")
    return max_tokens / wall


def mask_cost(tier: SerialEngineTier, tokens: list[int]) -> dict[str, float]:
    """Per-token µs of the mask's three steps, replaying ``tokens`` through a fresh matcher."""
    from llguidance import LLMatcher
    from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

    vocab = tier._vocab  # type: ignore[attr-defined]
    grammar = grammar_of(Generation(messages=[], response_format=FORMAT))
    assert grammar is not None
    matcher = LLMatcher(vocab.guide, grammar, limits=parser_limits())
    bitmask = allocate_token_bitmask(1, vocab.guide.vocab_size)
    row = np.random.default_rng(0).normal(size=vocab.guide.vocab_size).astype(np.float32)
    steps: dict[str, list[float]] = {"fill": [], "unpack": [], "apply": []}
    for token in tokens:
        t0 = time.perf_counter()
        fill_next_token_bitmask(matcher, bitmask)
        t1 = time.perf_counter()
        allowed = allowed_tokens(bitmask, row.shape[0])
        t2 = time.perf_counter()
        _mask(row.copy(), allowed)
        t3 = time.perf_counter()
        steps["fill"].append(t1 - t0)
        steps["unpack"].append(t2 - t1)
        steps["apply"].append(t3 - t2)
        matcher.consume_token(token)
    return {name: round(statistics.median(times) * 1e6, 1) for name, times in steps.items()}


async def measure(engine: str, max_tokens: int, repeats: int) -> dict[str, Any]:
    tier = tier_for(engine)
    await tier.start()
    consumed: list[int] = []
    consume = _Guide.consume

    def recording(self: _Guide, token: int, name: str) -> None:
        consumed.append(token)
        consume(self, token, name)

    _Guide.consume = recording  # type: ignore[method-assign,assignment]
    try:
        await rate(tier, 8, False)
        await rate(tier, 8, True)  # warm-up: the prompt's KV, the first grammar
        plain: list[float] = []
        constrained: list[float] = []
        for round_no in range(repeats):
            for constrain in [True, False] if round_no % 2 else [False, True]:
                if constrain:
                    consumed.clear()
                (constrained if constrain else plain).append(await rate(tier, max_tokens, constrain))
        if not consumed:  # the last round ran plain last: one more json answer for its tokens
            await rate(tier, max_tokens, True)
        mask = mask_cost(tier, list(consumed))
    finally:
        _Guide.consume = consume  # type: ignore[method-assign]
        await tier.aclose()
    ratio = statistics.median(j / p for j, p in zip(constrained, plain, strict=True))
    per_token_us = 1e6 / statistics.median(plain)
    return {
        "engine": engine,
        "plain_tokens_per_s": round(statistics.median(plain), 2),
        "json_tokens_per_s": round(statistics.median(constrained), 2),
        "json_vs_plain_paired": round(ratio, 3),
        "plain_rounds": [round(r, 2) for r in plain],
        "json_rounds": [round(r, 2) for r in constrained],
        "mask_us": mask,
        "mask_share_of_token": round(sum(mask.values()) / per_token_us, 4),
    }


def export(rev: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "archive", rev, "tiers"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def against(rev: str, engines: list[str], max_tokens: int, repeats: int) -> list[dict[str, Any]]:
    """Plain tokens/s of ``rev``'s tiers and this tree's, greedy and at the default temperature."""
    rows = []
    with tempfile.TemporaryDirectory(prefix="tiergate-bench-rev-") as tmp:
        export(rev, Path(tmp))
        trees = {rev: tmp, "this tree": str(ROOT)}
        for engine in engines:
            for temperature in ("0", "default"):
                rates: dict[str, list[float]] = {name: [] for name in trees}
                for round_no in range(repeats):
                    for name in list(trees)[:: 1 if round_no % 2 == 0 else -1]:
                        command = [sys.executable, "-c", PLAIN_RATE, engine, str(ONNX_DIR)]
                        out = subprocess.run(
                            [*command, str(max_tokens), "3", temperature],
                            env={**os.environ, "PYTHONPATH": trees[name]},
                            check=True,
                            capture_output=True,
                            text=True,
                        ).stdout
                        rates[name].append(statistics.median(json.loads(out.strip().splitlines()[-1])))
                old, new = rates[rev], rates["this tree"]
                paired = statistics.median(n / o for n, o in zip(new, old, strict=True))
                rows.append(
                    {
                        "engine": engine,
                        "temperature": temperature,
                        "rev": rev,
                        "rev_tokens_per_s": round(statistics.median(old), 2),
                        "tree_tokens_per_s": round(statistics.median(new), 2),
                        "tree_vs_rev_paired": round(paired, 3),
                        "rev_rounds": [round(r, 2) for r in old],
                        "tree_rounds": [round(r, 2) for r in new],
                    }
                )
    return rows


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--engines", default="llamacpp,onnx")
    parser.add_argument("--against", default="", help="a git revision to compare plain tokens/s with")
    args = parser.parse_args(argv)
    engines = args.engines.split(",")
    if "onnx" in engines and not (ONNX_DIR / "model.onnx").exists():
        print(f"no ONNX export at {ONNX_DIR}: ONNX rows skipped (run tiergate models export-onnx)")
        engines.remove("onnx")
    rows = [await measure(engine, args.max_tokens, args.repeats) for engine in engines]
    header = f"{'engine':<9} {'plain tok/s':>11} {'json tok/s':>10} {'json/plain':>10} " + (
        f"{'fill µs':>8} {'unpack µs':>9} {'apply µs':>8} {'mask/token':>10}"
    )
    print(f"\n{header}")
    for r in rows:
        m = r["mask_us"]
        print(
            f"{r['engine']:<9} {r['plain_tokens_per_s']:>11} {r['json_tokens_per_s']:>10} "
            f"{r['json_vs_plain_paired']:>10} {m.get('fill', 0):>8} {m.get('unpack', 0):>9} "
            f"{m.get('apply', 0):>8} {r['mask_share_of_token']:>10.2%}"
        )
    versus = against(args.against, engines, args.max_tokens, args.repeats) if args.against else []
    for v in versus:
        print(
            f"plain {v['engine']} (temperature {v['temperature']}): {v['rev']} "
            f"{v['rev_tokens_per_s']} tok/s, this tree {v['tree_tokens_per_s']} tok/s "
            f"(paired {v['tree_vs_rev_paired']})"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "max_tokens": args.max_tokens,
                "repeats": args.repeats,
                "rows": rows,
                "against": versus,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
