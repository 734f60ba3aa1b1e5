"""A batch survives its gateway being killed (SIGKILL) mid-batch: the next start takes back the lines
that were running, runs every line not done, and finalizes the batch; every custom_id is in the
output exactly once and every line has exactly one ledger row (a line run again after the kill has
the same row id, so the row the killed run wrote ahead is the one kept).  A real gateway process, the
real llama.cpp edge, the official client."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

from tests.conftest import start_gateway
from tests.integration.test_batches import contents, finished, jsonl, line

CONFIG = (
    "[cloud]\nenabled = false\n[ledger]\nflush_interval_s = 0.1\n[batch]\npoll_s = 0.1\nconcurrency = 2\n"
)
LINES = 12


def test_a_batch_killed_mid_way_completes_once_after_a_restart(tmp_path: Path) -> None:
    gateway = start_gateway(tmp_path, CONFIG)
    url = "/v1/chat/completions"
    body = {"model": "edge", "max_tokens": 12, "temperature": 0}
    lines = [
        line(f"k{i}", url, {**body, "messages": [{"role": "user", "content": f"Fact {i}."}]})
        for i in range(LINES)
    ]
    try:
        client = gateway.client(timeout=60)
        uploaded = client.files.create(file=("kill.jsonl", jsonl(lines)), purpose="batch")
        batch = client.batches.create(input_file_id=uploaded.id, endpoint=url, completion_window="24h")
        deadline = time.monotonic() + 60
        while (done := client.batches.retrieve(batch.id).request_counts.completed) < 3:  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "no line ran"
            time.sleep(0.05)
    finally:
        os.kill(gateway.process.pid, signal.SIGKILL)
        gateway.process.wait(30)
    assert done < LINES, "the batch ended before the kill; nothing to resume"

    restarted = start_gateway(tmp_path, CONFIG)
    try:
        client = restarted.client(timeout=60)
        batch = finished(client, batch.id, timeout=120)
        assert batch.status == "completed"
        counts = batch.request_counts
        assert counts is not None and (counts.total, counts.completed, counts.failed) == (LINES, LINES, 0)
        output = contents(client, batch.output_file_id)
        assert sorted(x["custom_id"] for x in output) == sorted(f"k{i}" for i in range(LINES))
        assert batch.error_file_id is None
        deadline = time.monotonic() + 10
        while True:
            with sqlite3.connect(restarted.data_dir / "tiergate.db") as db:
                rows = db.execute(
                    "SELECT l.request_id FROM ledger l JOIN ledger_tags t ON t.entry_id = l.entry_id "
                    "WHERE t.key = 'batch' AND t.value = ?",
                    (batch.id,),
                ).fetchall()
            if len(rows) >= LINES or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert sorted(r[0] for r in rows) == sorted(f"{batch.id}-{n}" for n in range(1, LINES + 1))
    finally:
        restarted.stop()
