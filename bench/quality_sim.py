"""A simulated deployment for the quality model: does the router learn where the edge is good enough?

No model runs: the router (:class:`router.Router`, the learned strategy) and its learner (with the
quality model, router/_learning/quality.py) run in process, and each answer's acceptability is drawn
from a known rate per request class and tier.  Two tenants send a mix of four classes, each prompt
made from templates written here, in other words than the difficulty model's templates
(router/_learning/difficulty.py):

    class        edge   cloud   what it is
    facts        0.95   0.95    one-line facts: the edge is enough
    reasoning    0.30   0.95    multi-step arithmetic and logic: the edge fails most
    rewrite      0.90   0.95    rewrites and lists of a few sentences: the edge is enough
    code         0.50   0.90    short code and queries: the edge fails half

A client gives feedback on an answer with probability ``FEEDBACK`` (its label is the answer's
outcome); a bad answer without feedback is re-asked with probability ``REASK`` (the gateway's bad
label).  Training runs until each tenant has ``--labels`` labels; from the declared prior (edge
0.4, cloud 0.7, the built-in difficulty classifier), then the trained router routes a fresh
evaluation workload of every class, with exploration on as in service.

Printed, and written to bench/results/quality_sim.json: the share of each class sent to the cloud
before and after; the cost/quality curve of the learned router (over ``acceptable_floor``) beside
the static threshold (the declared quality against the difficulty, over the threshold) and a
random mix (over the cloud share), each as (share sent to the cloud, expected acceptability,
quality recovered = the share of the edge-to-cloud acceptability gap closed); and how many labels
per tenant it takes until >= 90 % of reasoning goes to the cloud and >= 80 % of facts stays on
the edge.

    .venv/bin/python -m bench.quality_sim                   # 200 labels per tenant, ~1 min
    .venv/bin/python -m bench.quality_sim --labels 100 --no-write
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import router
from tiers import Capabilities, Health, Modality, TierState

RESULT = Path(__file__).parent / "results" / "quality_sim.json"
TEXT = frozenset({Modality.TEXT})
FEEDBACK = 0.5  # a client labels an answer this often
REASK = 0.5  # a bad answer without feedback is asked again this often
EXPLORATION = 0.05  # the router setting (the gateway's default is 0.02: set [router] exploration)
TENANTS = ("acme", "globex")
# Quality alone decides here: no latency objective (the latency predictors learn nothing in this sim).
NO_OBJECTIVE = router.LatencyObjective(total_ms=None)
MIX = {"acme": (0.4, 0.3, 0.2, 0.1), "globex": (0.2, 0.3, 0.2, 0.3)}  # per class, in CLASSES' order


@dataclasses.dataclass(frozen=True)
class Kind:
    name: str
    edge: float  # the probability an edge answer is acceptable
    cloud: float
    templates: tuple[str, ...]
    max_tokens: tuple[int, ...]


_FILL = {
    "country": ("Chile", "Vietnam", "Ghana", "Portugal", "Mongolia", "Iceland", "Morocco", "Nepal"),
    "animal": ("spider", "horse", "ant", "octopus", "parrot", "crab"),
    "noun": ("widget", "lamp", "ticket", "crate", "marble", "bottle"),
    "n": ("3", "7", "12", "15", "24", "40"),
    "m": ("2", "5", "9", "11"),
    "sentence": (
        "The meeting moved to Thursday.",
        "Please bring the signed forms.",
        "Lunch will be provided for everyone.",
        "The car park is closed for repairs.",
        "Our supplier raised prices last month.",
    ),
    "item": ("milk", "batteries", "stamps", "rice", "tape", "soap", "paint"),
}

CLASSES = (
    Kind(
        "facts",
        0.95,
        0.95,
        (
            "Which ocean lies west of {country}?",
            "How many legs does a {animal} have?",
            "What currency do people use in {country}?",
            "On which continent is {country}?",
            "What is the plural of {noun}?",
            "How many minutes are there in {n} hours?",
            "Who wrote Don Quixote?",
            "What is the chemical symbol for gold?",
        ),
        (16, 32, 64),
    ),
    Kind(
        "reasoning",
        0.30,
        0.95,
        (
            "A stall sells each {noun} for {n} dollars and every third one is free; what do {m} dozen "
            "cost? Explain each stage of the working.",
            "Three friends split a bill of {n}0 euros: the first pays twice the second, the third pays "
            "{m} less than the first. How much does each pay? Walk through the algebra.",
            "If every {noun} is heavy and some heavy things float, must some {noun}s float? Justify "
            "the answer carefully.",
            "{n} people each greet everyone else once. How many greetings happen? Derive a general "
            "formula and check it for {m} people.",
            "Pipe A fills a tank in {n} hours and pipe B drains it in {m} hours. With both open, when "
            "is it full? Set up the equation and reason it out.",
            "A clock gains {m} minutes a day. After how many days does it show the right time again? "
            "Argue each inference.",
        ),
        (256, 512, 1024),
    ),
    Kind(
        "rewrite",
        0.90,
        0.95,
        (
            "Rewrite this note in a friendlier tone, keeping every fact: {sentence} {sentence} {sentence}",
            "Make a tidy bulleted list of: {item}, {item}, {item}, {item}.",
            "Correct the grammar here without changing the meaning: {sentence} {sentence}",
            "Shorten this to one line: {sentence} {sentence}",
        ),
        (64, 128, 256),
    ),
    Kind(
        "code",
        0.50,
        0.90,
        (
            "Write a SQL query returning the {n} newest orders per customer from tables orders and "
            "customers.",
            "Fix the off-by-one bug: for i in range(1, len(xs)): total += xs[i]",
            "Write a regular expression matching {noun} ids like AB-{n}{m} and explain its groups.",
            "Write a bash one-liner that counts the lines of every .log file in a folder.",
        ),
        (128, 256, 512),
    ),
)
BY_NAME = {k.name: k for k in CLASSES}


def _views() -> list[router.TierView]:
    caps = {n: Capabilities(TEXT, 8192, f"{n}-model", quality=q) for n, q in (("edge", 0.4), ("cloud", 0.7))}
    return [router.TierView(n, caps[n], TierState(n, Health.READY)) for n in ("edge", "cloud")]


PRICES = {
    "edge": router.TierPrice(prompt_per_1k=0.00002, completion_per_1k=0.0001),
    "cloud": router.TierPrice(prompt_per_1k=0.0005, completion_per_1k=0.0015),
}


def request(kind: Kind, tenant: str, rng: random.Random) -> router.Features:
    text = rng.choice(kind.templates).format_map({k: rng.choice(v) for k, v in _FILL.items()})
    return router.Features.estimate(
        text_chars=len(text),
        turns=1,
        max_tokens=rng.choice(kind.max_tokens),
        modalities=TEXT,
        stream=False,
        tenant=tenant,
        text=text,
    )


def _draw_class(tenant: str, rng: random.Random) -> Kind:
    return rng.choices(CLASSES, weights=MIX[tenant])[0]


@dataclasses.dataclass
class Sim:
    learner: router.Learner
    policy: router.TenantPolicy
    views: list[router.TierView]
    rng: random.Random
    decider: router.Router = dataclasses.field(default_factory=router.Router)

    def route(self, features: router.Features, policy: router.TenantPolicy | None = None) -> router.Decision:
        chosen = policy or self.policy
        snapshot = self.learner.snapshot(features, self.views, chosen)
        decision = self.decider.decide(features, self.views, chosen, snapshot)
        self.learner.finished(decision, decision.tier)  # served: measured lately
        return decision

    def serve(self, tenant: str) -> tuple[int, router.Decision]:
        """One request of ``tenant`` served; its labels learned.  How many labels it gave."""
        kind = _draw_class(tenant, self.rng)
        decision = self.route(request(kind, tenant, self.rng))
        good = self.rng.random() < getattr(kind, decision.tier)
        snapshot = decision.snapshot
        assert snapshot is not None and snapshot.quality_keys is not None
        labelled = self.rng.random() < FEEDBACK or (not good and self.rng.random() < REASK)
        if labelled:
            self.learner.label([(tenant, decision.tier, snapshot.quality_keys, good, time.time())])
        return int(labelled), decision


def new_sim(
    seed: int,
    difficulty: router.DifficultyModel,
    floor: float = 0.7,
    config: router.QualityConfig | None = None,
) -> Sim:
    config = config or router.QualityConfig()
    learner = router.Learner(
        PRICES, exploration=EXPLORATION, seed=seed, difficulty=difficulty, quality=config
    )
    policy = router.TenantPolicy(acceptable_floor=floor, latency=NO_OBJECTIVE)
    return Sim(learner, policy, _views(), random.Random(seed))


def evaluate(
    sim: Sim, per_class: int, seed: int, policy: router.TenantPolicy | None = None
) -> dict[str, Any]:
    """Route ``per_class`` fresh requests of each class for each tenant (learning nothing): per class
    the share sent to the cloud, and over the whole mix the expected acceptability and cloud share."""
    rng = random.Random(seed)
    cloud: dict[str, int] = {k.name: 0 for k in CLASSES}
    quality = share = total = 0.0
    for tenant in TENANTS:
        for kind, weight in zip(CLASSES, MIX[tenant], strict=True):
            for _ in range(per_class):
                tier = sim.route(request(kind, tenant, rng), policy).tier
                cloud[kind.name] += tier == "cloud"
                quality += weight * getattr(kind, tier)
                share += weight * (tier == "cloud")
                total += weight
    n = per_class * len(TENANTS)
    return {
        "cloud_share": {k: round(v / n, 3) for k, v in cloud.items()},
        "mix_cloud_share": round(share / total, 4),
        "mix_acceptable": round(quality / total, 4),
    }


def meets(shares: dict[str, float]) -> bool:
    return shares["reasoning"] >= 0.9 and 1 - shares["facts"] >= 0.8


def train(
    sim: Sim, labels: int, check_every: int, eval_per_class: int, seed: int
) -> tuple[int | None, list[Any]]:
    """Serve until every tenant has ``labels`` labels; every ``check_every`` labels per tenant, evaluate.
    The first count at which the targets hold (None: never), and the trajectory."""
    got = dict.fromkeys(TENANTS, 0)
    first, trajectory, mark = None, [], check_every
    while min(got.values()) < labels:
        for tenant in TENANTS:
            if got[tenant] < labels:
                got[tenant] += sim.serve(tenant)[0]
        if min(got.values()) >= mark:
            shares = evaluate(sim, eval_per_class, seed + mark)["cloud_share"]
            trajectory.append({"labels_per_tenant": mark, "cloud_share": shares})
            if first is None and meets(shares):
                first = mark
            mark += check_every
    return first, trajectory


def curves(
    sim: Sim, difficulty: router.DifficultyModel, per_class: int, seed: int
) -> dict[str, list[dict[str, float]]]:
    """The cost/quality curve of each router on the same evaluation workload."""
    learned = []
    for floor in (0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
        r = evaluate(sim, per_class, seed, router.TenantPolicy(acceptable_floor=floor, latency=NO_OBJECTIVE))
        learned.append({"acceptable_floor": floor, **_point(r)})
    static = []
    for threshold in (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01):
        r = _static(difficulty, threshold, per_class, seed)
        static.append({"threshold": threshold, **_point(r)})
    random_mix = []
    for p in (0.0, 0.25, 0.5, 0.75, 1.0):
        q = sum(
            w * (p * k.cloud + (1 - p) * k.edge)
            for t in TENANTS
            for k, w in zip(CLASSES, MIX[t], strict=True)
        ) / len(TENANTS)
        random_mix.append({"cloud_share": p, "acceptable": round(q, 4)})
    edge_only, cloud_only = random_mix[0]["acceptable"], random_mix[-1]["acceptable"]
    for point in (*learned, *static, *random_mix):
        point["recovered"] = round((point["acceptable"] - edge_only) / (cloud_only - edge_only), 3)
    return {"learned": learned, "static_threshold": static, "random_mix": random_mix}


def _point(result: dict[str, Any]) -> dict[str, float]:
    return {"cloud_share": result["mix_cloud_share"], "acceptable": result["mix_acceptable"]}


def _static(
    difficulty: router.DifficultyModel, threshold: float, per_class: int, seed: int
) -> dict[str, Any]:
    """The declared-quality router with the difficulty threshold moved: to the cloud from ``threshold``."""
    rng = random.Random(seed)
    quality = share = total = 0.0
    for tenant in TENANTS:
        for kind, weight in zip(CLASSES, MIX[tenant], strict=True):
            for _ in range(per_class):
                f = request(kind, tenant, rng)
                tier = "cloud" if difficulty.estimate(f.text, f) >= threshold else "edge"
                quality += weight * getattr(kind, tier)
                share += weight * (tier == "cloud")
                total += weight
    return {"mix_cloud_share": round(share / total, 4), "mix_acceptable": round(quality / total, 4)}


def run_seeds(labels: int, seeds: Sequence[int], eval_per_class: int) -> dict[str, Any]:
    """:func:`run` for the first seed (its curves), and the others' outcomes beside it: what the router
    learns depends on which requests its first explorations drew."""
    first, *rest = seeds
    result = run(labels, first, eval_per_class)
    result["seeds"] = [_outcome(result)]
    for seed in rest:
        result["seeds"].append(_outcome(run(labels, seed, eval_per_class, curves_too=False)))
    return result


def _outcome(result: dict[str, Any]) -> dict[str, Any]:
    keep = ("seed", "targets_met", "labels_to_targets")
    return {**{k: result[k] for k in keep}, "before": result["before"], "after": result["after"]}


def run(
    labels: int = 200,
    seed: int = 1,
    eval_per_class: int = 100,
    check_every: int = 25,
    *,
    curves_too: bool = True,
) -> dict[str, Any]:
    difficulty = router.builtin_model()
    sim = new_sim(seed, difficulty)
    started = time.perf_counter()
    before = evaluate(sim, eval_per_class, seed + 10_000)
    first, trajectory = train(sim, labels, check_every, max(20, eval_per_class // 4), seed)
    after = evaluate(sim, eval_per_class, seed + 20_000)
    result = {
        "labels_per_tenant": labels,
        "seed": seed,
        "feedback": FEEDBACK,
        "reask": REASK,
        "exploration": EXPLORATION,
        "classes": {k.name: {"edge": k.edge, "cloud": k.cloud} for k in CLASSES},
        "mix": MIX,
        "before": before,
        "after": after,
        "targets_met": meets(after["cloud_share"]),
        "labels_to_targets": first,
        "trajectory": trajectory,
        "report": sim.learner.quality.report(),
        "curves": curves(sim, difficulty, eval_per_class // 2, seed + 30_000) if curves_too else {},
        "seconds": round(time.perf_counter() - started, 1),
    }
    for row in result["report"]:
        row.pop("hours", None)
    return result


def table(result: dict[str, Any]) -> str:
    lines = [f"{'class':<10} {'edge':>5} {'cloud':>5}  {'to cloud before':>15}  {'to cloud after':>14}"]
    for k in CLASSES:
        lines.append(
            f"{k.name:<10} {k.edge:>5.2f} {k.cloud:>5.2f}  {result['before']['cloud_share'][k.name]:>15.0%}"
            f"  {result['after']['cloud_share'][k.name]:>14.0%}"
        )
    lines.append(
        f"labels per tenant {result['labels_per_tenant']}; targets met: {result['targets_met']}; "
        f"labels to targets: {result['labels_to_targets']}"
    )
    for other in result.get("seeds", [])[1:]:
        shares = " ".join(f"{k} {v:.0%}" for k, v in other["after"]["cloud_share"].items())
        lines.append(
            f"seed {other['seed']}: to cloud after: {shares}; mix {other['after']['mix_cloud_share']:.0%} "
            f"at {other['after']['mix_acceptable']:.3f}; targets met: {other['targets_met']}"
        )
    lines.append(f"{'router':<18} {'to cloud':>8} {'acceptable':>10} {'recovered':>9}")
    for name, points in result["curves"].items():
        for p in points:
            knob = next(iter(p)) if name != "random_mix" else ""
            label = f"{name} {p[knob]:g}" if knob else name
            lines.append(
                f"{label:<18} {p['cloud_share']:>8.0%} {p['acceptable']:>10.3f} {p['recovered']:>9.2f}"
            )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--labels", type=int, default=200, help="labels per tenant to train on")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--eval", type=int, default=100, help="evaluation requests per class and tenant")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    result = run_seeds(args.labels, args.seeds, args.eval)
    print(table(result))
    if not args.no_write:
        RESULT.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {RESULT}")


if __name__ == "__main__":
    main()
