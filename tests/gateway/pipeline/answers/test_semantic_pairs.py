"""The semantic cache's rates on labelled sets, with the real all-MiniLM-L6-v2 and the real guard.

tests/data/semantic_pairs.tsv holds paraphrase pairs (the same answer) and near-miss pairs (mostly the
same words, another answer), written for this test over many domains; tests/data/
semantic_pairs_fresh.tsv was written blind to the guard by another engineer and showed the guard
overfitted to the first (6.5 % false hits).  Both, whole, are the calibration set: the guard's checks
were fixed on what they missed, and the default threshold (the policy's) is the lowest of a 0.01 grid
with no false hit on them, the sweep printed.  tests/data/semantic_pairs_blind.tsv, written blind to
the guard and to both sets, was run once with the guard and threshold final, never tuned on: it
shows what they are worth on pairs of another hand.  Goals (docs/cache.md): false hits <= 1 % on near
misses, paraphrase hits >= 60 %.  The rates without the judge (the guard without WordNet) are
printed beside them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

import router
from gateway.pipeline.answers.semantic.guard import agree, terms
from gateway.pipeline.answers.semantic.judge import Judge, judge_in
from gateway.settings import load_settings
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, OnnxEmbedder

DATA = Path(__file__).resolve().parents[3] / "data"
PAIRS = DATA / "semantic_pairs.tsv"
FRESH = DATA / "semantic_pairs_fresh.tsv"  # written blind to the guard; now calibration
# Written blind to the guard and to both sets by another engineer; run once, never tuned on.
BLIND = DATA / "semantic_pairs_blind.tsv"
# A fourth set, written blind to the guard and to the three others, after the checks added on the
# third's run: it measures those checks on pairs nobody tuned on.  Run once; never tuned on.
BLIND4 = DATA / "semantic_pairs_blind4.tsv"
THRESHOLD = router.SemanticCachePolicy().threshold
SWEEP = [round(0.70 + i / 100, 2) for i in range(21)]  # 0.70 .. 0.90
MAX_FALSE_HITS = 0.01
# The blind set's one run: 31 of 152 paraphrases hit (20.4 %), 4 of 155 near misses (2.6 %); with the
# negation check and every occurrence of a preposition as an anchor, both added after that run (so no
# longer blind), 1 of 155 (0.6 %) and the same 31 hits.
BLIND_PARAPHRASE_HITS, BLIND_FALSE_HITS = 31 / 152, 1 / 155
# Its one run: 23 of 150 paraphrases hit (15.3 %), 7 of 150 near misses (4.7 %): the guard's checks,
# fixed on the third set's run, did not carry to a fourth hand (docs/cache.md lists the seven).
BLIND4_PARAPHRASE_HITS, BLIND4_FALSE_HITS = 23 / 150, 7 / 150
MIN_PARAPHRASE_HITS = 0.60
Pair = tuple[str, str, str]


def pairs(path: Path = PAIRS) -> list[Pair]:
    rows = [
        line.rstrip("\n").split("\t") for line in path.read_text().splitlines() if not line.startswith("#")
    ]
    return [(kind, a, b) for kind, a, b in rows]


def sets() -> dict[str, list[Pair]]:
    return {"old": pairs(), "fresh": pairs(FRESH)}


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


def rates(
    rows: list[Pair], sims: np.ndarray, judge: Judge | None, threshold: float = THRESHOLD
) -> dict[str, float]:
    hits: dict[str, list[bool]] = {"paraphrase": [], "near_miss": []}
    for (kind, a, b), s in zip(rows, sims, strict=True):
        hits[kind].append(bool(s >= threshold) and agree(terms(a), terms(b), judge))
    return {kind: sum(found) / len(found) for kind, found in hits.items()} | {
        f"{kind}_pairs": len(found) for kind, found in hits.items()
    }


def measured(rows: list[Pair], judge: Judge) -> tuple[dict[str, float], dict[str, float]]:
    """The rates with and without the judge at the default threshold, printed."""
    sims = similarities([a for _, a, _ in rows], [b for _, _, b in rows])
    return rates(rows, sims, judge), rates(rows, sims, None)


def shown(name: str, rate: dict[str, float], before: dict[str, float]) -> str:
    return (
        f"\n{name} at threshold {THRESHOLD}: paraphrase hits {rate['paraphrase']:.1%} "
        f"({rate['paraphrase_pairs']} pairs; {before['paraphrase']:.1%} without WordNet), false hits "
        f"{rate['near_miss']:.1%} ({rate['near_miss_pairs']} near-miss pairs; {before['near_miss']:.1%} without)"
    )


def test_the_set_is_large_and_varied_enough() -> None:
    kinds = [kind for kind, _, _ in pairs()]
    assert kinds.count("paraphrase") >= 100 and kinds.count("near_miss") >= 100
    assert set(kinds) == {"paraphrase", "near_miss"}


def test_the_default_threshold_is_the_lowest_with_no_false_hit_on_the_calibration_sets() -> None:
    judge = the_judge()
    rows = [row for found in sets().values() for row in found]
    sims = similarities([a for _, a, _ in rows], [b for _, _, b in rows])
    sweep = {t: rates(rows, sims, judge, t) for t in SWEEP}
    print(f"\ncalibration ({len(rows)} pairs, old + fresh): threshold -> paraphrase hits, false hits")
    for t, rate in sweep.items():
        print(f"  {t:.2f}  {rate['paraphrase']:6.1%}  {rate['near_miss']:5.1%}")
    safe = [t for t, rate in sweep.items() if rate["near_miss"] == 0]
    assert min(safe) == THRESHOLD, f"the lowest threshold with no false hit is {min(safe)}"
    # the margin costs little: the best threshold within the 1 % goal gains under 4 points of hits
    within = max(rate["paraphrase"] for rate in sweep.values() if rate["near_miss"] <= MAX_FALSE_HITS)
    assert within - sweep[THRESHOLD]["paraphrase"] < 0.04


def test_hit_and_false_hit_rates_at_the_default_threshold() -> None:
    judge = the_judge()
    found: dict[str, dict[str, float]] = {}
    for name, rows in sets().items():
        found[name], without = measured(rows, judge)
        print(shown(name, found[name], without))
        # The judge never costs a false hit the guard without it does not make already.
        assert found[name]["near_miss"] <= without["near_miss"], name
        assert found[name]["paraphrase"] >= without["paraphrase"], name
        assert found[name]["near_miss"] <= MAX_FALSE_HITS, (
            f"{name}: false hits {found[name]['near_miss']:.1%}"
        )
    assert found["old"]["paraphrase"] >= MIN_PARAPHRASE_HITS, f"old: {found['old']['paraphrase']:.1%}"
    # The fresh set misses the paraphrase goal (docs/cache.md says why: 74 of its 158 paraphrases
    # are under 0.85 cosine); this bound records its figure (20.9 %) so that it cannot get worse unseen.
    assert found["fresh"]["paraphrase"] >= 0.20


HELD_OUT = [
    pytest.param(BLIND, BLIND_PARAPHRASE_HITS, BLIND_FALSE_HITS, id="blind"),
    pytest.param(BLIND4, BLIND4_PARAPHRASE_HITS, BLIND4_FALSE_HITS, id="fourth"),
]


@pytest.mark.parametrize(("path", "min_hits", "max_false_hits"), HELD_OUT)
def test_a_held_out_set(path: Path, min_hits: float, max_false_hits: float) -> None:
    judge = the_judge()
    found, without = measured(pairs(path), judge)
    print(shown(path.stem, found, without))
    assert found["near_miss"] <= without["near_miss"] and found["paraphrase"] >= without["paraphrase"]
    # Bounds at the figures of each set's one run (docs/cache.md, "Measured"), not the goals: they
    # record what the guard and threshold are worth on pairs of another hand, so that it cannot get
    # worse unseen.
    assert found["paraphrase"] >= min_hits
    assert found["near_miss"] <= max_false_hits
