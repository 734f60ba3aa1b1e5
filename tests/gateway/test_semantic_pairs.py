"""The semantic cache's rates on a labelled set, with the real all-MiniLM-L6-v2 and the real guard.

tests/data/semantic_pairs.tsv holds paraphrase pairs (the same answer) and near-miss pairs (mostly the
same words, another answer), written for this test over many domains.  The default threshold (the
policy's 0.85) and the guard's word lists were chosen on the calibration half (even lines); the rates
are printed for both halves, and the held-out half (odd lines) shows what they are worth on pairs that
were not looked at.  Goals (docs/cache.md): false hits <= 1 % on near misses, paraphrase hits >= 60 %.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

import router
from gateway.pipeline.semantic.guard import agree, terms
from gateway.settings import load_settings
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, OnnxEmbedder

PAIRS = Path(__file__).resolve().parent.parent / "data" / "semantic_pairs.tsv"
THRESHOLD = router.SemanticCachePolicy().threshold
MAX_FALSE_HITS = 0.01
MIN_PARAPHRASE_HITS = 0.60


def pairs() -> list[tuple[str, str, str]]:
    rows = [
        line.rstrip("\n").split("\t") for line in PAIRS.read_text().splitlines() if not line.startswith("#")
    ]
    return [(kind, a, b) for kind, a, b in rows]


def similarities(texts_a: list[str], texts_b: list[str]) -> np.ndarray:
    folder = Path(load_settings().build_cache_dir).expanduser() / DEFAULT_EMBEDDING_MODEL_DIR
    embedder = OnnxEmbedder(EmbeddingConfig(model_dir=str(folder)))
    if not embedder.available:
        pytest.skip(f"the embedding model is not built in {folder} (scripts/setup.sh)")

    async def run() -> np.ndarray:
        await embedder.loaded()
        try:
            a = await embedder.embed(embedder.tokenize(texts_a))
            b = await embedder.embed(embedder.tokenize(texts_b))
        finally:
            await embedder.aclose()
        return np.asarray((a * b).sum(axis=1))

    return asyncio.run(run())


def test_the_set_is_large_and_varied_enough() -> None:
    kinds = [kind for kind, _, _ in pairs()]
    assert kinds.count("paraphrase") >= 100 and kinds.count("near_miss") >= 100
    assert set(kinds) == {"paraphrase", "near_miss"}


def test_hit_and_false_hit_rates_at_the_default_threshold() -> None:
    rows = pairs()
    sims = similarities([a for _, a, _ in rows], [b for _, _, b in rows])
    rates: dict[str, dict[str, float]] = {}
    for half, name in ((0, "calibration"), (1, "held-out")):
        picked = [
            (kind, a, b, s)
            for i, ((kind, a, b), s) in enumerate(zip(rows, sims, strict=True))
            if i % 2 == half
        ]
        hits = {
            kind: [s >= THRESHOLD and agree(terms(a), terms(b)) for k, a, b, s in picked if k == kind]
            for kind in ("paraphrase", "near_miss")
        }
        rates[name] = {kind: sum(found) / len(found) for kind, found in hits.items()}
        print(
            f"\n{name} half at threshold {THRESHOLD}: paraphrase hits {rates[name]['paraphrase']:.1%} "
            f"({len(hits['paraphrase'])} pairs), false hits {rates[name]['near_miss']:.1%} "
            f"({len(hits['near_miss'])} near-miss pairs)"
        )
    for name, rate in rates.items():
        assert rate["near_miss"] <= MAX_FALSE_HITS, f"{name}: false hits {rate['near_miss']:.1%}"
    assert rates["calibration"]["paraphrase"] >= MIN_PARAPHRASE_HITS
    # Held out, paraphrase hits fall short of the goal (docs/cache.md says by how much); this bound
    # keeps them from falling further unseen.
    assert rates["held-out"]["paraphrase"] >= 0.45
