"""The near-miss guard's cost per candidate, with and without its WordNet judge, and the judge's memory.

Method
------
In one process, no gateway: every pair of ``tests/data/semantic_pairs.tsv`` (both halves; this is
timing, not tuning) is one candidate, checked the way the semantic cache checks a candidate:
``agree(terms(stored), asked_terms, judge)`` (the asked turn's terms are made once per lookup, so
outside the timing).  Each candidate is timed alone (``perf_counter_ns``) in ``--repeats`` rounds:

* ``no judge``: the guard as it is without WordNet (the baseline);
* ``judge, cold``: a fresh judge over a fresh reader each round (nothing memoised: no word pair, word
  or synset), so a pair of swapped words pays its WordNet look-ups (binary searches of the mapped
  index files, synset reads); the first candidates of a new word in a running gateway;
* ``judge, warm``: the same judge again, its memo filled (a stored turn asked about again).

Reported: p50 and p99 over all (candidate, round) timings, and the same for the candidates that reach
the judge (a word of each turn unmatched: the only ones it costs anything), in microseconds; the added
p50 is against the baseline of the same run.  Memory: ``RssAnon`` (the heap) and ``RssFile`` (mapped
file pages, the kernel's to drop) of ``/proc/self/status`` before the judge is opened and after every
round, and the time to open it.  ``bench/results/semantic_guard.json`` keeps them.
Run: ``PYTHONPATH=. .venv/bin/python -m bench.semantic_guard`` (the 2-core machine is shared: ±20 %).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from bench.cache import pct
from gateway.pipeline.answers.semantic.guard import Terms, _unmatched, agree, terms
from gateway.pipeline.answers.semantic.judge import Judge, judge_in
from gateway.pipeline.answers.semantic.wordnet import WordNet
from gateway.settings import load_settings

ROOT = Path(__file__).resolve().parent.parent
PAIRS = ROOT / "tests" / "data" / "semantic_pairs.tsv"
RESULTS = ROOT / "bench" / "results" / "semantic_guard.json"


def memory_kib() -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return {name: int(fields[name].split()[0]) for name in ("RssAnon", "RssFile")}


def timed(candidates: list[tuple[str, Terms]], judge: Judge | None) -> list[float]:
    took = []
    for stored, asked in candidates:
        started = time.perf_counter_ns()
        agree(terms(stored), asked, judge)
        took.append((time.perf_counter_ns() - started) / 1000)
    return took


def summary(took: list[float]) -> dict[str, float]:
    return {"n": len(took), "p50_us": pct(took, 0.5), "p99_us": pct(took, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rows = [line.split("\t") for line in PAIRS.read_text().splitlines() if not line.startswith("#")]
    candidates = [(a, terms(b)) for _, a, b in rows]
    swapped = [
        i
        for i, (a, asked) in enumerate(candidates)
        if _unmatched(terms(a).words, asked.words) and _unmatched(asked.words, terms(a).words)
    ]
    before = memory_kib()
    started = time.perf_counter()
    opened = judge_in(load_settings().build_cache_dir)
    open_ms = (time.perf_counter() - started) * 1000
    if opened is None:
        raise SystemExit("WordNet is not in the build cache: run scripts/setup.sh")
    runs: dict[str, list[list[float]]] = {"no judge": [], "judge, cold": [], "judge, warm": []}
    for _ in range(args.repeats):
        runs["no judge"].append(timed(candidates, None))
        judge = Judge(WordNet(opened.wordnet.folder))  # nothing memoised (the pages stay mapped)
        runs["judge, cold"].append(timed(candidates, judge))
        runs["judge, warm"].append(timed(candidates, judge))
    after = memory_kib()
    results: dict[str, Any] = {}
    for name, rounds in runs.items():
        every = [t for r in rounds for t in r]
        judged = [r[i] for r in rounds for i in swapped]
        results[name] = {"all": summary(every), "reaching the judge": summary(judged)}
    base = results["no judge"]
    for row in results.values():
        for part in ("all", "reaching the judge"):
            row[part]["added_p50_us"] = row[part]["p50_us"] - base[part]["p50_us"]
    header = f"{'guard':14} {'candidates':>10} {'n':>6} {'p50 us':>8} {'p99 us':>8} {'+p50 us':>8}"
    print(header)
    print("-" * len(header))
    for name, row in results.items():
        for part, r in row.items():
            print(
                f"{name:14} {part:>10.10} {r['n']:>6} {r['p50_us']:>8.1f} {r['p99_us']:>8.1f} "
                f"{r['added_p50_us']:>8.1f}"
            )
    print(f"{len(swapped)} of {len(candidates)} candidates reach the judge (a word of each turn unmatched)")
    print(f"opening WordNet: {open_ms:.2f} ms; memory before {before} KiB, after {after} KiB")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "results": results,
                "open_ms": open_ms,
                "memory_kib": {"before": before, "after": after},
                "candidates": len(candidates),
                "reaching_the_judge": len(swapped),
                "settings": {"repeats": args.repeats},
                "machine": {"python": platform.python_version()},
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
