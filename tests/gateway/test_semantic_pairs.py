"""The semantic cache's rates on labelled sets, with the real all-MiniLM-L6-v2 and the real guard.

tests/data/semantic_pairs.tsv holds paraphrase pairs (the same answer) and near-miss pairs (mostly the
same words, another answer), written for this test over many domains.  The default threshold (the
policy's 0.85), the guard's word lists and its WordNet judge (how many senses count) were chosen on
the calibration half (even lines); the held-out half (odd lines) shows what they are worth on pairs
that were not looked at, and tests/data/semantic_pairs_fresh.tsv (written blind to the guard by
another engineer, run once the judge was final, never tuned on) what they are worth on pairs of
another hand.  Goals (docs/cache.md): false hits <= 1 % on near misses, paraphrase hits
>= 60 %.  The rates without the judge (the guard as it is without WordNet) are printed beside them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

import router
from gateway.pipeline.semantic.guard import agree, terms
from gateway.pipeline.semantic.judge import Judge, judge_in
from gateway.settings import load_settings
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, OnnxEmbedder

DATA = Path(__file__).resolve().parent.parent / "data"
PAIRS = DATA / "semantic_pairs.tsv"
# Written blind to the guard by another engineer, after the judge was final; never tuned on.
FRESH = DATA / "semantic_pairs_fresh.tsv"
THRESHOLD = router.SemanticCachePolicy().threshold
MAX_FALSE_HITS = 0.01
MIN_PARAPHRASE_HITS = 0.60
Pair = tuple[str, str, str]


def pairs(path: Path = PAIRS) -> list[Pair]:
    rows = [
        line.rstrip("\n").split("\t") for line in path.read_text().splitlines() if not line.startswith("#")
    ]
    return [(kind, a, b) for kind, a, b in rows]


def sets() -> dict[str, list[Pair]]:
    rows = pairs()
    return {"calibration": rows[0::2], "held-out": rows[1::2], "fresh": pairs(FRESH)}


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


def the_judge() -> Judge:
    judge = judge_in(load_settings().build_cache_dir)
    if judge is None:
        pytest.skip("WordNet is not in the build cache (scripts/setup.sh)")
    return judge


def rates(rows: list[Pair], sims: np.ndarray, judge: Judge | None) -> dict[str, float]:
    hits: dict[str, list[bool]] = {"paraphrase": [], "near_miss": []}
    for (kind, a, b), s in zip(rows, sims, strict=True):
        hits[kind].append(bool(s >= THRESHOLD) and agree(terms(a), terms(b), judge))
    return {kind: sum(found) / len(found) for kind, found in hits.items()} | {
        f"{kind}_pairs": len(found) for kind, found in hits.items()
    }


def test_the_set_is_large_and_varied_enough() -> None:
    kinds = [kind for kind, _, _ in pairs()]
    assert kinds.count("paraphrase") >= 100 and kinds.count("near_miss") >= 100
    assert set(kinds) == {"paraphrase", "near_miss"}


def test_hit_and_false_hit_rates_at_the_default_threshold() -> None:
    judge = the_judge()
    found: dict[str, dict[str, float]] = {}
    without: dict[str, dict[str, float]] = {}
    for name, rows in sets().items():
        sims = similarities([a for _, a, _ in rows], [b for _, _, b in rows])
        found[name] = rate = rates(rows, sims, judge)
        without[name] = before = rates(rows, sims, None)
        print(
            f"\n{name} at threshold {THRESHOLD}: paraphrase hits {rate['paraphrase']:.1%} "
            f"({rate['paraphrase_pairs']} pairs; {before['paraphrase']:.1%} without WordNet), false hits "
            f"{rate['near_miss']:.1%} ({rate['near_miss_pairs']} near-miss pairs; {before['near_miss']:.1%} without)"
        )
    for name, rate in found.items():
        # The judge never costs a false hit the guard without it does not make already.
        assert rate["near_miss"] <= without[name]["near_miss"], name
        assert rate["paraphrase"] >= without[name]["paraphrase"], name
    for name in ("calibration", "held-out"):
        assert found[name]["near_miss"] <= MAX_FALSE_HITS, (
            f"{name}: false hits {found[name]['near_miss']:.1%}"
        )
        assert found[name]["paraphrase"] >= MIN_PARAPHRASE_HITS, f"{name}: {found[name]['paraphrase']:.1%}"
    # The fresh set misses both goals (docs/cache.md, "Measured", says why: paraphrases under the
    # threshold, and near misses the word check does not see: in / out, on / off, left / right, the same
    # words in another order).  Nothing was tuned on it; these bounds record the figures of its one
    # run (23.4 % and 6.5 %) so that they cannot get worse unseen.
    assert found["fresh"]["paraphrase"] >= 0.23
    assert found["fresh"]["near_miss"] <= 0.065
