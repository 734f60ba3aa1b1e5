"""The batch store on its own, on SQLite and on a real PostgreSQL: several gateways (stores with
owners of their own) claiming lines of one batch at once take each line once (``FOR UPDATE SKIP
LOCKED``), one of them finalizes it, and a claim whose gateway died is taken again after its lease;
a finished line keeps its first answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from gateway.accounts.batches import BatchStore, FileStore
from gateway.accounts.storage import open_database

LINES = 60
ENGINES: list[Engine] = []


@pytest.fixture(autouse=True)
def closed() -> Iterator[None]:
    """Each test's connections closed after it (a PostgreSQL server waits for them to stop)."""
    yield
    while ENGINES:
        ENGINES.pop().dispose()


def stores(url: str, data: Path, n: int, lease_s: float = 600.0) -> list[BatchStore]:
    made = []
    for i in range(n):
        engine = open_database(url)
        ENGINES.append(engine)
        files = FileStore(engine, data, 1 << 30, 100_000)
        made.append(BatchStore(engine, files, owner=f"gw{i}", lease_s=lease_s, max_line=1 << 20))
    return made


def batch_of(store: BatchStore, tenant: str, lines: int = LINES) -> str:
    upload = store.files.upload()
    for i in range(lines):
        body = {"model": "m", "input": str(i)}
        upload.write(
            json.dumps(
                {"custom_id": f"c{i}", "method": "POST", "url": "/v1/embeddings", "body": body}
            ).encode()
            + b"\n"
        )
    record = store.files.keep(upload, tenant, "in.jsonl", "batch")
    return store.create(tenant, "key", record.id, "/v1/embeddings", None).id


def work_together(gateways: list[BatchStore]) -> dict[str, list[int]]:
    """Every store claims and finishes lines, two at a time, in threads at once, until none is left."""
    taken: dict[str, list[int]] = {g.owner: [] for g in gateways}

    def work(store: BatchStore) -> None:
        while jobs := store.claim(2):
            for job in jobs:
                taken[store.owner].append(job.line)
                store.finish(job, 200, b'{"object": "list"}', None)

    threads = [threading.Thread(target=work, args=(g,)) for g in gateways]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return taken


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_gateways_share_a_batch_each_line_once(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'db.sqlite'}"
        if database == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    gateways = stores(url, tmp_path, 3)
    batch_id = batch_of(gateways[0], f"t-{database}-{tmp_path.name}")
    taken = work_together(gateways)
    every = sorted(line for lines in taken.values() for line in lines)
    assert every == list(range(1, LINES + 1))  # each line once
    if database == "postgresql":
        assert sum(bool(lines) for lines in taken.values()) >= 2  # the work was shared
    assert batch_id in gateways[1].ready_to_end()
    finalized = [g.finalize(batch_id) for g in gateways]
    assert finalized.count(True) == 1
    done = gateways[2].get(None, batch_id)
    assert done.status == "completed" and (done.completed, done.failed) == (LINES, 0)
    assert done.output_file_id is not None and done.error_file_id is None
    out = gateways[0].files.get(done.tenant, done.output_file_id)
    written = b"".join(gateways[0].files.chunks(out)).splitlines()
    assert sorted(json.loads(x)["custom_id"] for x in written) == sorted(f"c{i}" for i in range(LINES))


def test_a_claim_whose_gateway_died_is_taken_again_and_a_done_line_keeps_its_answer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    first, second = stores(url, tmp_path, 2, lease_s=0.0)
    batch_of(first, "t", lines=1)
    (job,) = first.claim(1)
    (again,) = second.claim(1)  # first's lease (0 s) is over: second takes the line
    assert (again.batch_id, again.line) == (job.batch_id, job.line)
    second.finish(again, 200, b'{"n": 2}', None)
    first.finish(job, 200, b'{"n": 1}', None)  # too late: the line is done
    assert first.claim(1) == []
    first.finalize(job.batch_id)
    done = first.get("t", job.batch_id)
    assert done.output_file_id is not None
    out = first.files.get("t", done.output_file_id)
    (written,) = b"".join(first.files.chunks(out)).splitlines()
    assert json.loads(written)["response"]["body"] == {"n": 2}
