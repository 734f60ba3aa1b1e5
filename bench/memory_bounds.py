"""What one entry of each structure that grows with traffic costs, measured with tracemalloc in-process.

For docs/reliability.md "Memory bounds": the bytes one more entry keeps allocated (the objects a
request would otherwise free counted in, as in tests/gateway/accounts/test_feedback_memory.py), so
that entry × bound is what the structure costs when full.  Python objects only: SQLite's page caches
and the models are native and bounded by their settings, not measured here.

    .venv/bin/python -m bench.memory_bounds

``--sqlite`` adds the result cache's SQLite: the RSS a fresh process gains storing and reading back
20,000 embedding-sized entries (1.5 KB) in a DiskStore, with diskcache's own defaults and with
tiergate's (``[cache] sqlite_cache_mib``/``sqlite_mmap_mib``).

Prints a table and writes bench/results/memory_bounds.json.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import router
from cache import DiskStore
from gateway.accounts.quality.feedback import Outcomes
from gateway.accounts.quality.settings import FeedbackSettings
from gateway.accounts.tenants._throttle import FailureThrottle
from gateway.ops.metrics import Metrics
from router._learning.quality import BIAS
from tiers import Modality

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "memory_bounds.json"
WORDS = [f"word{i}" for i in range(5000)]


def per_entry(n: int, add: Callable[[int], None]) -> float:
    """Bytes still allocated after ``add(i)`` for i in 0..n-1, divided by n."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(n):
            add(i)
        return (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()


def keys(rng: random.Random) -> router.QualityKeys:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40)))
    features = router.Features.estimate(
        text_chars=len(text),
        turns=1,
        max_tokens=16,
        modalities=frozenset({Modality.TEXT}),
        stream=False,
        text=text,
    )
    return router.quality_keys(features, 0.3)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def fill(directory: str, memory: dict[str, int] | None, entries: int = 20_000) -> float:
    """MiB of RSS gained storing and reading ``entries`` vectors-sized values in a DiskStore."""
    store = DiskStore(directory, 1 << 30, memory)
    await store.set("warm", b"x", 60)
    await store.get("warm")
    before = rss_mib()
    value = os.urandom(1536)
    for i in range(0, entries, 100):
        await store.set_many([(f"k{j}", value) for j in range(i, i + 100)], 3600)
    for i in range(0, entries, 8):
        await store.get_many([f"k{j}" for j in range(i, i + 8)])
    gained = rss_mib() - before
    await store.aclose()
    return gained


def sqlite_figures() -> dict[str, float]:
    """Each configuration in a fresh interpreter, so one's pages do not count in the other's."""
    out = {}
    for name, memory in (
        ("diskcache defaults", "None"),
        ("tiergate defaults (4 MiB, no map)", "sqlite_memory(4, 0)"),
    ):
        with tempfile.TemporaryDirectory() as tmp:
            code = (
                "import asyncio; from bench.memory_bounds import fill; from cache import sqlite_memory; "
                f"print(asyncio.run(fill({tmp!r}, {memory})))"
            )
            ran = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
            )
            out[f"result cache, 20,000 x 1.5 KB stored and read, RSS MiB: {name}"] = float(ran.stdout.strip())
    return out


def main() -> None:
    rng = random.Random(43)
    out: dict[str, float] = {}
    outcomes = Outcomes(lambda *_: None, settings=FeedbackSettings(answers_held=100_000))
    out["feedback answer (8-40 word prompt)"] = per_entry(
        5000, lambda i: outcomes.answered(os.urandom(16).hex(), "t", "edge", keys(rng), None)
    )
    sessions = Outcomes(
        lambda *_: None, settings=FeedbackSettings(answers_held=100_000, sessions_held=100_000)
    )
    answer_only = out["feedback answer (8-40 word prompt)"]
    out["feedback session's last turn"] = (
        per_entry(
            5000, lambda i: sessions.answered(os.urandom(16).hex(), "t", "edge", keys(rng), f"user-{i}")
        )
        - answer_only
    )
    out["Responses id (resp_ → request id)"] = per_entry(
        5000, lambda i: outcomes.alias(f"resp_{os.urandom(16).hex()}", os.urandom(16).hex())
    )
    throttle = FailureThrottle(20, 60.0, max_addresses=1_000_000)
    out["failed-auth address"] = per_entry(
        5000, lambda i: throttle.failed(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}")
    )
    model = router.QualityModel()
    every_bucket = tuple(range(BIAS + 1)), tuple([0.01] * (BIAS + 1))
    out["quality model: a tenant's weights for one tier, every bucket labelled"] = per_entry(
        20,
        lambda i: model.label(f"tenant-{i}", "edge", every_bucket, i % 2 == 0),  # type: ignore[arg-type]
    )
    out["quality model: a tenant's first label on one tier (8-40 words)"] = per_entry(
        2000, lambda i: model.label(f"new-{i}", "edge", keys(rng), True)
    )
    metrics = Metrics()
    out["metrics: one request label set (counter + histogram)"] = per_entry(
        31, lambda i: metrics.request_done("/v1/chat/completions", f"t{i}", "edge", "m", 200, 0.01)
    )
    sqlite = sqlite_figures() if "--sqlite" in sys.argv else {}
    width = max(map(len, [*out, *sqlite]))
    for name, value in out.items():
        print(f"{name:<{width}} {value:>10,.0f} bytes")
    for name, value in sqlite.items():
        print(f"{name:<{width}} {value:>10,.1f} MiB")
    RESULTS.write_text(
        json.dumps({"method": __doc__, "bytes_per_entry": out, "sqlite_mib": sqlite}, indent=1)
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
