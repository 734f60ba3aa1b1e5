"""What residency rules cost a request: detection on a 2 KB prompt, and a whole request with rules
against the same request without them, same run.

Method: (1) ``gateway.residency.scan`` with all six detectors as ``keep_local`` rules on two 2 KB
prompts: prose (a few numbers) and a number-heavy one (dates, order numbers, versions in every
sentence: the digit-run scan and the validators' worst ordinary case); median of ``--repeats``
calls.  (2) One gateway app (open mode, no cache, no ledger) over an in-process tier that answers at
once (bench/_asgi_ab.py), with and without those rules in the default policy: the same chat request
with the prose prompt, rounds interleaved, median wall time per request; the difference is what the
rules add to a request.

    python -m bench.residency --repeats 2000 --rounds 7 --requests 300

Prints a table and writes bench/results/residency.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

from bench._asgi_ab import InstantTier, lifespan, request_once
from gateway.app import create_app
from gateway.residency import compiled, scan
from gateway.residency.detect import DETECTORS
from gateway.settings import load_settings
from router import ResidencyRule

PROSE = (
    "Could you summarise the attached meeting notes for me? We discussed the roadmap for the next "
    "quarter, the hiring plan for 3 teams and the budget. Please keep it short and friendly, and list the "
    "decisions we took at the end, with who owns each of them. "
) * 9
NUMBERS = (
    "Our team reviewed the quarterly report on 2024-03-31 and found that order ORD-20240115-0042 "
    "shipped late. The version 1.22.3 of the client fixed the retry bug; see commit 3f2a9c1 for details. "
) * 12
RULES = [{"detector": d, "action": "keep_local"} for d in DETECTORS]


def _scan_us(text: str, repeats: int) -> float:
    rules = compiled([ResidencyRule(detector=r["detector"], action="keep_local") for r in RULES])  # type: ignore[arg-type]
    messages = [{"role": "user", "content": text[:2048]}]
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        scan(messages, rules)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


async def _requests(rounds: int, requests: int) -> dict[str, list[float]]:
    body = msgspec.json.encode(
        {"model": "cloud", "messages": [{"role": "user", "content": PROSE[:2048]}], "max_tokens": 8}
    )
    apps: dict[str, Any] = {}
    lifespans = []
    for name, rules in (("no rules", []), ("six rules", RULES)):
        overrides = {
            "auth.open_mode": True,
            "cache.enabled": False,
            "ledger.enabled": False,
            "policies.default.residency": rules,
            "cloud.location": "local",  # keep_local may use the stand-in tier
        }
        settings = load_settings(environ={}, data_dir=tempfile.mkdtemp(prefix="tiergate-bench-"), **overrides)
        apps[name] = create_app(settings, tiers={"cloud": InstantTier()})
        lifespans.append(await lifespan(apps[name]))
    samples: dict[str, list[float]] = {name: [] for name in apps}
    try:
        for app in apps.values():
            for _ in range(100):
                assert await request_once(app, body=body) == 200
        for _ in range(rounds):
            for name, app in apps.items():
                started = time.perf_counter()
                for _ in range(requests):
                    await request_once(app, body=body)
                samples[name].append((time.perf_counter() - started) / requests * 1e6)
    finally:
        for inbox, task in lifespans:
            await inbox.put({"type": "lifespan.shutdown"})
            await asyncio.wait_for(task, 30)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--out", default="bench/results/residency.json")
    args = parser.parse_args()
    detection = {"prose": _scan_us(PROSE, args.repeats), "number-heavy": _scan_us(NUMBERS, args.repeats)}
    samples = asyncio.run(_requests(args.rounds, args.requests))
    medians = {name: statistics.median(v) for name, v in samples.items()}
    print(f"{'detection, 2 KB prompt, six detectors':<44} {'us':>8}")
    for name, value in detection.items():
        print(f"  {name:<42} {value:>8.1f}")
    print(f"{'a chat request (prose prompt)':<44} {'us':>8}")
    for name, value in medians.items():
        print(f"  {name:<42} {value:>8.1f}")
    added = medians["six rules"] - medians["no rules"]
    print(f"  {'added by the rules':<42} {added:>8.1f}")
    report = {
        "method": __doc__,
        "detection_us": detection,
        "request_us": medians,
        "added_us": added,
        "samples": samples,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
