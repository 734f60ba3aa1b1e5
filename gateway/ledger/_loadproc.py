"""Moving closed write-ahead segments into the database from a child process.

Why a process: loading a segment is Python work (decoding rows, binding them into an
``executemany``) that a thread of the gateway would do while holding the GIL, and on a busy
event loop every such stretch stalls the requests waiting behind it.  Measured at 500
requests/s on one core (``bench/overhead.py``'s set-up, 0.5 s between loads): p99 latency
~6 ms with the loads in a thread, ~2.3 ms with the ledger off; see the README.  Here the
gateway only sends the segments' paths and gets a count back.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

_engine: Engine | None = None


def init(database_url: str) -> None:
    """Runs once in the child: its own engine on the gateway's database."""
    global _engine
    from gateway.storage import open_database

    _engine = open_database(database_url)


def load(paths: list[str]) -> int:
    """Runs in the child: load these segments, delete each once loaded; the rows loaded."""
    from gateway.ledger._writer import load_segments

    assert _engine is not None, "init() runs first"
    return load_segments(_engine, [Path(p) for p in paths])


def warm() -> None:
    """A no-op: submitted at start so the child's imports happen before the first load."""
