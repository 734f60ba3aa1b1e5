"""How far all-MiniLM-L6-v2's cosine alone separates paraphrases from near misses, per labelled pair set:
the ceiling under which the semantic cache's near-miss guard works.

Method
------
In one process, no gateway: each pair of each set in ``tests/data/semantic_pairs*.tsv`` (paraphrase:
the same answer; near_miss: mostly the same words, another answer) is embedded by the embedding tier
itself (``OnnxEmbedder``, the model ``scripts/setup.sh`` exports) and its cosine taken.  Per set:

* the median cosine of its paraphrase pairs and of its near-miss pairs, and the AUC (the chance that a
  random paraphrase pair embeds closer than a random near-miss pair; 0.5 is no signal);
* ``cosine alone at <= 1 %``: the lowest threshold that lets at most 1 % of the near misses through
  (the false-hit goal) and the share of paraphrases it lets through (the hit goal is 60 %);
* ``paraphrases >= T``: the share of paraphrases at or above the default threshold T (the policy's):
  no guard, however good, passes more at that threshold; and ``near misses >= T``: how many the guard
  alone must stop there.

Deterministic (the model is), so one run: ``PYTHONPATH=. .venv/bin/python -m bench.semantic_separation``.
Prints a table and writes bench/results/semantic_separation.json.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import numpy as np

import router
from bench.embeddings import write_results
from gateway.settings import load_settings
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, OnnxEmbedder

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "semantic_separation.json"
SETS = ("semantic_pairs", "semantic_pairs_fresh", "semantic_pairs_blind", "semantic_pairs_blind4")
MAX_FALSE_HITS = 0.01


def read_pairs(path: Path) -> list[tuple[str, str, str]]:
    rows = [line.split("\t") for line in path.read_text().splitlines() if not line.startswith("#")]
    return [(kind, a, b) for kind, a, b in rows]


async def cosines(embedder: OnnxEmbedder, pairs: list[tuple[str, str, str]]) -> np.ndarray:
    a = await embedder.embed(embedder.tokenize([p[1] for p in pairs]))
    b = await embedder.embed(embedder.tokenize([p[2] for p in pairs]))
    return np.asarray((a * b).sum(axis=1))  # unit vectors: the dot product is the cosine


def auc(high: np.ndarray, low: np.ndarray) -> float:
    """P(a paraphrase embeds closer than a near miss), ties counted half."""
    return float((high[:, None] > low[None, :]).mean() + (high[:, None] == low[None, :]).mean() / 2)


def separation(para: np.ndarray, near: np.ndarray, threshold: float) -> dict[str, float]:
    # The lowest threshold with at most 1 % of near misses at or above it: just over the near miss
    # that would be one too many.
    allowed = int(MAX_FALSE_HITS * len(near))
    ranked = np.sort(near)[::-1]
    cut = float(np.nextafter(ranked[allowed], 1.0)) if allowed < len(ranked) else float(ranked[-1])
    return {
        "paraphrase_median": round(float(np.median(para)), 3),
        "near_miss_median": round(float(np.median(near)), 3),
        "auc": round(auc(para, near), 3),
        "threshold_for_1pct": round(cut, 3),
        "paraphrase_hits_at_it": round(float(np.mean(para >= cut)), 3),
        "paraphrases_at_default": round(float(np.mean(para >= threshold)), 3),
        "near_misses_at_default": round(float(np.mean(near >= threshold)), 3),
    }


async def measure(embedder: OnnxEmbedder, threshold: float) -> dict[str, dict[str, float]]:
    await embedder.loaded()
    try:
        found = {}
        for name in SETS:
            pairs = read_pairs(ROOT / "tests" / "data" / f"{name}.tsv")
            sims = await cosines(embedder, pairs)
            para = np.array([s for (kind, _, _), s in zip(pairs, sims, strict=True) if kind == "paraphrase"])
            near = np.array([s for (kind, _, _), s in zip(pairs, sims, strict=True) if kind == "near_miss"])
            found[name] = {
                "paraphrases": len(para),
                "near_misses": len(near),
                **separation(para, near, threshold),
            }
        return found
    finally:
        await embedder.aclose()


def main(argv: list[str] | None = None) -> int:
    threshold = router.SemanticCachePolicy().threshold
    folder = Path(load_settings().build_cache_dir).expanduser() / DEFAULT_EMBEDDING_MODEL_DIR
    embedder = OnnxEmbedder(EmbeddingConfig(model_dir=str(folder)))
    if not embedder.available:
        raise SystemExit(f"the embedding model is not built in {folder} (scripts/setup.sh)")
    found = asyncio.run(measure(embedder, threshold))
    print(
        f"{'set':<22} {'pairs p/n':>9} {'cos p50 p/n':>11} {'AUC':>5} "
        f"{'T for <=1%':>10} {'p hits at it':>12} {f'p >= {threshold}':>9} {f'n >= {threshold}':>9}"
    )
    for name, row in found.items():
        print(
            f"{name:<22} {row['paraphrases']:>4}/{row['near_misses']:<4} "
            f"{row['paraphrase_median']:>5.3f}/{row['near_miss_median']:<5.3f} {row['auc']:>5.3f} "
            f"{row['threshold_for_1pct']:>10.3f} {row['paraphrase_hits_at_it']:>12.1%} "
            f"{row['paraphrases_at_default']:>9.1%} {row['near_misses_at_default']:>9.1%}"
        )
    write_results(RESULTS, "bench.semantic_separation", argv, {"default_threshold": threshold, "sets": found})
    return 0


if __name__ == "__main__":
    sys.exit(main())
