"""Semantic cache benchmark: a semantic hit (the embedding included) beside an exact hit and a miss
answered by the edge tier, in the same run, through one real gateway.

Method
------
A real gateway is started (``tiergate serve`` as a child process, edge tier only: SmolLM2-135M on
llama.cpp, cloud disabled, diskcache backend, the default policy's ``semantic_cache`` on) on a
loopback port.  One client (``httpx.Client``, keep-alive, one request at a time, so latencies are
not queueing) sends, at ``temperature=0``, ``max_tokens=16``:

1. misses: one question per country ("What is the capital of Peru?"), each answered by the edge
   model, stored, and added to the semantic index (its embedding counted in the miss);
2. exact hits: the same questions again, ``--hits`` requests cycling over them;
3. semantic hits: a paraphrase of each ("Which city is the capital of Peru?"), ``--hits`` requests
   cycling over them; each is embedded by the in-process MiniLM, searched, guarded and replayed.
   A paraphrase the semantic cache does not answer is left out of the timings and counted.

Latencies per request: ``server`` is the ``gateway`` entry of ``Server-Timing`` (parsed request to
the answer ready: cache key, embedding, index search, store read and decoding included); ``embed``
its ``embed`` entry (tokenizing and the ONNX call); ``e2e`` the client's wall time to the whole
body over loopback.  The baseline for the embedding: the same export's raw ONNX call for one turn,
timed in this process right after the gateway run (what any embedding costs on this machine now).
``--warmup`` requests of each kind are not counted.  Medians and p99 in milliseconds; the ratios are
against the exact hit of the same run.  ``bench/results/semantic_cache.json`` keeps them with the
run's settings.
Run: ``PYTHONPATH=. .venv/bin/python -m bench.semantic_cache`` (the 2-core machine is shared: ±20 %).
"""

from __future__ import annotations

import argparse
import json
import platform
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.cache import one, pct, start_gateway

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "semantic_cache.json"
_COUNTRY_NAMES = (
    "France Germany Italy Spain Portugal Peru Chile Kenya Egypt Japan Canada Norway Sweden Poland "
    "Greece Turkey India Brazil Mexico Argentina Ireland Austria Hungary Vietnam Thailand"
)
COUNTRIES = _COUNTRY_NAMES.split()
SEMANTIC_ON = "[auth]\nopen_mode = true\n[policies.default.semantic_cache]\nenabled = true\n"


def summary(rows: list[tuple[str, float, dict[str, float]]]) -> dict[str, Any]:
    server = [r[2]["gateway"] for r in rows]
    embed = [r[2].get("embed", 0.0) for r in rows]
    e2e = [r[1] for r in rows]
    return {
        "n": len(rows),
        "server_p50_ms": pct(server, 0.5),
        "server_p99_ms": pct(server, 0.99),
        "embed_p50_ms": pct(embed, 0.5),
        "e2e_p50_ms": pct(e2e, 0.5),
        "e2e_p99_ms": pct(e2e, 0.99),
    }


def raw_embedding_ms(texts: list[str], n: int) -> dict[str, Any]:
    """The baseline: the same MiniLM export's ONNX call for one turn, in this process, no gateway."""
    from gateway.settings import load_settings
    from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, OnnxEmbedder

    folder = Path(load_settings().build_cache_dir).expanduser() / DEFAULT_EMBEDDING_MODEL_DIR
    embedder = OnnxEmbedder(EmbeddingConfig(model_dir=str(folder)))
    embedder.load()
    rows = [embedder.tokenize([t]) for t in texts]
    took = []
    for i in range(n):
        started = time.perf_counter()
        embedder._run(rows[i % len(rows)])
        took.append((time.perf_counter() - started) * 1000)
    return {"n": n, "p50_ms": pct(took, 0.5), "p99_ms": pct(took, 0.99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hits", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    asked = [f"What is the capital of {c}?" for c in COUNTRIES]
    paraphrased = [f"Which city is the capital of {c}?" for c in COUNTRIES]
    with tempfile.TemporaryDirectory(prefix="tiergate-bench-") as tmp:
        proc, url = start_gateway(Path(tmp), SEMANTIC_ON)
        try:
            with httpx.Client(timeout=120) as client:
                for i in range(args.warmup):  # the models and the connection, then both caches
                    one(client, url, f"Warm-up {i}: what is the colour of the sky?", False)
                    one(client, url, f"Warm-up {i}: what is the colour of the sky?", False)
                    one(client, url, f"Warm-up {i}: which colour is the sky?", False)
                misses = [one(client, url, p, False) for p in asked]
                exact = [one(client, url, asked[i % len(asked)], False) for i in range(args.hits)]
                semantic = [one(client, url, paraphrased[i % len(asked)], False) for i in range(args.hits)]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    raw = raw_embedding_ms(paraphrased, args.hits)
    assert all(r[0] == "miss" for r in misses) and all(r[0] == "hit" for r in exact)
    answered = [r for r in semantic if r[0] == "semantic"]
    results = {
        "miss (edge tier)": summary(misses),
        "exact hit": summary(exact),
        "semantic hit": summary(answered),
    }
    base = results["exact hit"]["server_p50_ms"]
    for row in results.values():
        row["server_p50_vs_exact_hit"] = row["server_p50_ms"] / base if base else None
    header = (
        f"{'kind':18} {'n':>5} {'server p50':>11} {'p99':>8} {'embed p50':>10} {'e2e p50':>9} "
        f"{'p99':>8} {'x exact':>8}"
    )
    print(header)
    print("-" * len(header))
    for kind, r in results.items():
        print(
            f"{kind:18} {r['n']:>5} {r['server_p50_ms']:>11.2f} {r['server_p99_ms']:>8.2f} "
            f"{r['embed_p50_ms']:>10.2f} {r['e2e_p50_ms']:>9.2f} {r['e2e_p99_ms']:>8.2f} "
            f"{r['server_p50_vs_exact_hit']:>8.1f}"
        )
    print(f"paraphrases answered by the semantic cache: {len(answered)}/{len(semantic)}")
    print(
        "baseline, the raw ONNX call for one turn in this process: "
        f"p50 {raw['p50_ms']:.2f} ms, p99 {raw['p99_ms']:.2f} ms"
    )
    beyond = results["semantic hit"]["server_p50_ms"] - results["semantic hit"]["embed_p50_ms"]
    print(f"semantic hit, server p50 minus its embedding p50: {beyond:.2f} ms")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "results": results,
                "raw_onnx_embedding": raw,
                "semantic_hit_beyond_embedding_p50_ms": beyond,
                "paraphrases_answered": len(answered),
                "paraphrases_sent": len(semantic),
                "settings": {"hits": args.hits, "warmup": args.warmup, "countries": len(COUNTRIES)},
                "machine": {
                    "python": platform.python_version(),
                    "cpus": len(__import__("os").sched_getaffinity(0)),
                },
            },
            indent=2,
        )
        + "\n"
    )
    print(f"written to {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
