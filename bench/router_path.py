"""The router's CPU per request on the event loop: deciding and observing, with the learner folding
each observation inline (as before) and with it queued and folded in batches beside the requests.

Method
------
* In one process, two :class:`~gateway.pipeline.routing_service.RoutingService` (two tiers, ``edge`` and
  ``cloud``, the default prices, the built-in difficulty model), each taught the same 300 requests
  and fitted, so predictions come from fitted models with their online corrections.
* Per request: ``decide`` (the tenant's policy, the learner's snapshot, the pure decision, the work
  booked), then ``observe`` of what it took (made-up but varied: TTFT, total, tokens).
  *inline*: ``observe`` then fold at once (what ``observe`` did before: :meth:`Learner.observe` and
  the refit check on every request). *queued*: ``observe`` appends to the queue; every
  ``--batch`` requests the queue is folded (:meth:`RoutingService.fold_now`), timed apart: it runs
  beside the requests, not in them.
* Two kinds of request: *pinned* (``model: "cloud"``, "Say hello.", ``max_tokens`` 16: the body of
  ``bench.cpu_per_request``) and *learned* (``tiergate-auto``, four prompts from a greeting to a
  1,600-character one, the difficulty weighed).
* CPU time (``time.process_time``) over ``--requests`` per round; ``--repeats`` rounds alternating
  the variants; the table shows medians and the spread of the rounds.

    .venv/bin/python -m bench.router_path [--requests 2000] [--repeats 7] [--batch 50]

Prints a table and writes bench/results/router_path.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import router
from gateway.accounts.ledger import DEFAULT_PRICES
from gateway.pipeline.routing_service import RouterSettings, RoutingService, tier_prices
from router import PredictorConfig
from tiers import Capabilities, Health, Modality, TierState

RESULTS = Path(__file__).resolve().parent / "results" / "router_path.json"
TEXT = frozenset({Modality.TEXT})
PROMPTS = (
    "Say hello.",
    "What is the capital of France?",
    "Write a Python function that parses ISO 8601 dates and explain its edge cases. " * 4,
    "Summarise the following article: " + "lorem ipsum dolor sit amet, consectetur adipiscing. " * 30,
)


class _Tier:
    def __init__(self, name: str, quality: float) -> None:
        self.capabilities = Capabilities(TEXT, 4096, f"{name}-model", quality=quality)


VIEWS = [
    router.TierView(
        name, _Tier(name, q).capabilities, TierState(name, Health.READY, in_flight=busy), frozenset()
    )
    for name, q, busy in (("edge", 0.4, 1), ("cloud", 0.7, 0))
]


def features(kind: str, i: int) -> router.Features:
    if kind == "pinned":
        text, max_tokens, pinned = "Say hello.", 16, "cloud"
    else:
        text, max_tokens, pinned = PROMPTS[i % len(PROMPTS)], 64 * (1 + i % 4), None
    return router.Features.estimate(
        text_chars=len(text),
        turns=1 + i % 3,
        max_tokens=max_tokens,
        modalities=TEXT,
        stream=i % 2 == 1,
        tenant="acme",
        text=text,
        pinned=pinned,
    )


def took(i: int, tier: str) -> tuple[str, float | None, float, int, int]:
    """What request ``i`` took: (tier, ttft, total, completion tokens, prompt tokens)."""
    return tier, (0.05 + 0.01 * (i % 5) if i % 2 else None), 0.3 + 0.05 * (i % 9), 5 + i % 12, 20 + i % 30


def service(directory: Path, difficulty: router.DifficultyModel) -> RoutingService:
    settings = RouterSettings(predictor=PredictorConfig(refit_interval_s=1e9))  # no refit while measured
    prices = tier_prices(DEFAULT_PRICES, {v.name: _Tier(v.name, 0.5) for v in VIEWS})  # type: ignore[misc]
    routing = RoutingService(settings, router.AutoRule(), prices, directory)
    routing.learner.difficulty = difficulty
    for i in range(300):  # taught, then fitted
        decision = routing.decide(VIEWS, features("learned" if i % 2 else "pinned", i))
        routing.learner.observe(decision, *took(i, decision.tier))
    for tier, window in routing.learner.due():
        routing.learner.adopt(tier, router.fit_tier(window, {"min_samples": 16}))
    routing._loaded, routing._last_refit = True, time.monotonic()  # as after start(); refits are not due
    return routing


def round_of(routing: RoutingService, kind: str, requests: int, inline: bool, batch: int) -> dict[str, float]:
    """CPU seconds of one round: deciding, observing, and (queued) folding, per request in µs."""
    made = [features(kind, i) for i in range(requests)]
    decide = observe = fold = 0.0
    clock: Callable[[], float] = time.process_time
    for start in range(0, requests, batch):
        chunk = range(start, min(start + batch, requests))
        t0 = clock()
        decisions = [routing.decide(VIEWS, made[i]) for i in chunk]
        t1 = clock()
        if inline:
            for i, d in zip(chunk, decisions, strict=True):
                routing.learner.observe(d, *took(i, d.tier))
                routing._refit_if_due()
        else:
            for i, d in zip(chunk, decisions, strict=True):
                routing.observe(d, *took(i, d.tier))
        t2 = clock()
        if not inline:
            routing.fold_now()
        t3 = clock()
        decide, observe, fold = decide + t1 - t0, observe + t2 - t1, fold + t3 - t2
    per = 1e6 / requests
    return {"decide_us": decide * per, "observe_us": observe * per, "fold_us": fold * per}


async def measure(requests: int, repeats: int, batch: int) -> dict[str, Any]:
    difficulty = router.builtin_model()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("pinned", "learned"):
            services = {v: service(Path(tmp) / v, difficulty) for v in ("inline", "queued")}
            for v, routing in services.items():  # warm
                round_of(routing, kind, 200, v == "inline", batch)
            rounds: dict[str, list[dict[str, float]]] = {"inline": [], "queued": []}
            for _ in range(repeats):
                for v, routing in services.items():
                    rounds[v].append(round_of(routing, kind, requests, v == "inline", batch))
            out[kind] = {v: summary(rs) for v, rs in rounds.items()}
    return out


def summary(rounds: list[dict[str, float]]) -> dict[str, Any]:
    path = [r["decide_us"] + r["observe_us"] for r in rounds]
    return {
        **{k: statistics.median(r[k] for r in rounds) for k in rounds[0]},
        "path_us": statistics.median(path),
        "path_spread_us": [min(path), max(path)],
        "rounds": rounds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per round")
    parser.add_argument("--repeats", type=int, default=7, help="rounds per variant (≥ 5)")
    parser.add_argument("--batch", type=int, default=50, help="queued: requests between folds")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    results = asyncio.run(measure(args.requests, max(args.repeats, 5), args.batch))
    print(
        f"{'kind':8} {'variant':7} {'decide µs':>10} {'observe µs':>11} {'path µs':>9} "
        f"{'spread':>13} {'fold µs/req':>12} {'path ×':>7}"
    )
    for kind, variants in results.items():
        base = variants["inline"]["path_us"]
        for v, s in variants.items():
            low, high = s["path_spread_us"]
            print(
                f"{kind:8} {v:7} {s['decide_us']:10.1f} {s['observe_us']:11.1f} {s['path_us']:9.1f} "
                f"{low:6.1f}–{high:<6.1f} {s['fold_us']:12.1f} {s['path_us'] / base:7.2f}"
            )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    report = {"requests": args.requests, "repeats": max(args.repeats, 5), "batch": args.batch, **results}
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
