"""The batch runner's bookkeeping on a real store: a line whose task is cancelled before its first
step (an interactive request arriving just as the line was claimed) goes back to pending at once,
not left claimed until its lease runs out (ten minutes by default: a batch that stalled that long
with one line left is how this was found)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from sqlalchemy import select

from gateway.accounts.batches import BatchSettings, BatchStore, FileStore
from gateway.accounts.batches._store import batch_lines
from gateway.accounts.storage import open_database
from gateway.api.batches.runner import BatchRunner
from gateway.ops.metrics import Metrics
from tests.gateway.accounts.test_batch_store import batch_of


def states(store: BatchStore, batch_id: str) -> dict[str, int]:
    c = batch_lines.c
    with store._engine.connect() as conn:
        rows = conn.execute(select(c.state).where(c.batch_id == batch_id)).all()
    counted: dict[str, int] = {}
    for (state,) in rows:
        counted[state] = counted.get(state, 0) + 1
    return counted


async def test_a_line_cancelled_before_it_starts_is_pending_again(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    try:
        store = BatchStore(
            engine, FileStore(engine, tmp_path, 1 << 30, 1000), owner="gw", lease_s=600, max_line=1 << 20
        )
        batch_id = batch_of(store, "acme", lines=4)
        metrics = Metrics()
        services: Any = SimpleNamespace(
            settings=SimpleNamespace(batch=BatchSettings(concurrency=2)),
            metrics=metrics,
            tiers=SimpleNamespace(gates=SimpleNamespace(by_tier={})),
        )
        runner = BatchRunner(services, store)
        await runner._claim(2)
        assert states(store, batch_id) == {"running": 2, "pending": 2}
        runner._yield()  # an interactive request asks for a slot before the lines' first step
        for _ in range(200):
            await asyncio.sleep(0.01)
            if not runner._running and not runner._writes:
                break
        assert states(store, batch_id) == {"pending": 4}
        assert metrics.batch_lines.labels("yielded")._value.get() == 2
        await runner.aclose()
    finally:
        engine.dispose()
