"""What one tenant's labels do to another's routing, and to its own other traffic (issue 43), in process.

No model runs: the router and its learner (router/_learning/quality.py, the default settings,
exploration off) route two tenants' requests of two kinds, both on the edge before any label (short
facts and word games, written apart from the difficulty model's templates):

    1. tenant A labels 100, then 300, edge answers to facts bad: where A's facts, A's word games and
       tenant B's requests of both kinds go (the share of requests kept where they went before), and
       the acceptability the model gives each (learned or not); then B labels 40 of its own good
    2. the bound on the shared prior: B's figure for facts after 40 labels of its own (80 % and 95 %
       good), with and without A's 300 bad labels before them
    3. A, after its 300 bad labels on facts, labels word games 95 % good: the share of them on the
       edge after 0, 10, 20 and 40 of those labels
    4. what the model costs a request: both tiers' acceptability for a tenant with 300 labels

tests/hostile/test_feedback_isolation.py checks the first through a real gateway with the real edge.

    .venv/bin/python -m bench.quality_isolation        # ~10 s
"""

from __future__ import annotations

import random
import timeit
from collections.abc import Sequence

import router
from bench.quality_sim import PRICES, _views
from tiers import Modality

FILL = {
    "animal": ("spider", "horse", "ant", "octopus", "parrot", "crab", "camel", "eagle"),
    "country": ("Chile", "Ghana", "Peru", "Nepal", "Iceland", "Morocco", "Canada", "Japan"),
    "noun": ("lamp", "crate", "marble", "ticket", "bottle", "widget", "kettle", "pillow"),
    "language": ("Spanish", "German", "Italian", "Dutch", "Polish"),
    "n": ("17", "23", "41", "58", "66", "92"),
}
FACTS = (  # labelled bad by tenant A
    "How many legs does a {animal} have?",
    "What currency do people use in {country}?",
    "On which continent is {country}?",
    "What is the capital of {country}?",
)
WORDS = (  # never labelled by tenant A (but in scenario 3)
    "Spell the word {noun} backwards.",
    "Give one word that rhymes with {noun}.",
    "Suggest a name for a pet {animal}.",
    "Say good morning in {language}.",
    "Translate {noun} into {language}.",
    "Write the number {n} in words.",
)
KINDS = {"facts": FACTS, "words": WORDS}
TEXT = frozenset({Modality.TEXT})
POLICY = router.TenantPolicy(latency=router.LatencyObjective(total_ms=60_000))


def prompts(templates: Sequence[str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(templates).format_map({k: rng.choice(v) for k, v in FILL.items()}) for _ in range(n)]


def features(text: str, tenant: str) -> router.Features:
    return router.Features.estimate(
        text_chars=len(text), turns=1, max_tokens=1, modalities=TEXT, stream=False, tenant=tenant, text=text
    )


class World:
    """A learner and the router, with the labels of one deployment."""

    def __init__(self, config: router.QualityConfig | None = None) -> None:
        self.learner = router.Learner(PRICES, exploration=0.0, seed=1, quality=config)
        self.learner.difficulty = router.builtin_model()
        self.views = _views()
        self.decider = router.Router()

    def route(self, text: str, tenant: str) -> router.Decision:
        f = features(text, tenant)
        decision = self.decider.decide(f, self.views, POLICY, self.learner.snapshot(f, self.views, POLICY))
        self.learner.finished(decision, decision.tier)
        return decision

    def label(self, texts: Sequence[str], tenant: str, good: Sequence[bool]) -> None:
        for text, verdict in zip(texts, good, strict=True):
            keys = self.learner.snapshot(features(text, tenant), self.views, POLICY).quality_keys
            assert keys is not None
            self.learner.label([(tenant, "edge", keys, verdict, 0.0)])

    def edge(self, tenant: str, kind: str, n: int = 60) -> tuple[list[str], float, float]:
        """Where ``n`` requests of ``kind`` go, the mean acceptability of the edge, the share learned."""
        decisions = [self.route(t, tenant) for t in prompts(KINDS[kind], n, 99)]
        figures = [d.snapshot.acceptable["edge"] for d in decisions if d.snapshot is not None]
        mean = sum(a.mean for a in figures) / len(figures)
        return [d.tier for d in decisions], mean, sum(a.learned for a in figures) / len(figures)


def isolation() -> list[str]:
    world = World()
    cells = [(t, k) for t in ("a", "b") for k in KINDS]
    first = {c: world.edge(*c) for c in cells}
    before = {c: tiers for c, (tiers, _, _) in first.items()}
    lines = ["kept where it went before / the edge's mean acceptability / the share learned, per tenant.kind"]
    lines.append(f"{'after':<22}" + "".join(f"{f'{t}.{k}':>23}" for t, k in cells))
    row = [
        f"{tiers.count('edge') / len(tiers):>6.0%} edge {mean:>5.2f} {learned:>6.0%}"
        for tiers, mean, learned in first.values()
    ]
    lines.append(f"{'(no label)':<22}" + "".join(row))
    bad = prompts(FACTS, 300, 10)
    steps = (("A: 100 bad on facts", "a", bad[:100], False), ("A: 300 bad on facts", "a", bad[100:], False))
    steps += (("B: 40 good", "b", prompts(FACTS, 20, 20) + prompts(WORDS, 20, 21), True),)
    for said, tenant, texts, good in steps:
        world.label(texts, tenant, [good] * len(texts))
        row = []
        for c in cells:
            tiers, mean, learned = world.edge(*c)
            kept = sum(a == b for a, b in zip(before[c], tiers, strict=True)) / len(tiers)
            row.append(f"{kept:>9.0%} {mean:>5.2f} {learned:>6.0%}")
        lines.append(f"{said:<22}" + "".join(row))
    return lines


def bound() -> list[str]:
    lines = []
    for rate in (0.8, 0.95):
        said = []
        for poisoned in (False, True):
            world = World()
            if poisoned:
                world.label(prompts(FACTS, 300, 10), "a", [False] * 300)
            rng = random.Random(5)
            world.label(prompts(FACTS, 40, 30), "b", [rng.random() < rate for _ in range(40)])
            said.append(world.edge("b", "facts")[1])
        lines.append(
            f"B's 40 own labels {rate:.0%} good: figure {said[0]:.2f} alone, {said[1]:.2f} after A's 300 bad"
        )
    return lines


def recovery() -> list[str]:
    world = World()
    world.label(prompts(FACTS, 300, 10), "a", [False] * 300)
    rng = random.Random(6)
    texts = prompts(WORDS, 40, 40)
    good = [rng.random() < 0.95 for _ in texts]
    out, given = [], 0
    for n in (0, 10, 20, 40):
        world.label(texts[given:n], "a", good[given:n])
        given = n
        tiers, mean, learned = world.edge("a", "words")
        on_edge = tiers.count("edge") / len(tiers)
        out.append(f"{n}: {on_edge:.0%} on the edge (figure {mean:.2f}, {learned:.0%} learned)")
    return ["A's word games labelled 95 % good after its 300 bad facts: " + "; ".join(out)]


def cost() -> list[str]:
    """The request path's share: the edge's and the cloud's acceptability for a tenant with 300 labels."""
    world = World()
    texts = prompts(FACTS + WORDS, 300, 50)
    world.label(texts, "a", [i % 3 > 0 for i in range(300)])
    model, rng = world.learner.quality, random.Random(0)
    keys = [router.quality_keys(features(t, "a"), 0.2) for t in prompts(FACTS + WORDS, 200, 51)]

    def assess() -> None:
        for k in keys:
            model.assess("a", "edge", 0.4, k, rng)
            model.assess("a", "cloud", 0.7, k, rng)

    best = min(timeit.repeat(assess, number=5, repeat=7)) / (5 * len(keys))
    return [f"assess, two tiers, a tenant with 300 labels: {best * 1e6:.0f} µs a request (best of 7)"]


def main() -> None:
    for lines in (isolation(), bound(), recovery(), cost()):
        print("\n".join(lines))


if __name__ == "__main__":
    main()
