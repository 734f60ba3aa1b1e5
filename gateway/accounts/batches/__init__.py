"""OpenAI's Files and Batch APIs' storage: files on the data folder, batches and their lines in the
database (SQLite embedded, PostgreSQL shared by several gateways), and ``[batch]``'s settings."""

import secrets
from pathlib import Path
from typing import Annotated

import msgspec
from sqlalchemy import Engine

from gateway.accounts.batches._files import FileRecord, FileStore, Upload
from gateway.accounts.batches._lines import ENDPOINTS, LineError
from gateway.accounts.batches._store import ACTIVE, BatchRecord, BatchStore, LineJob


class BatchSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # An uploaded file, at most (OpenAI's: 200 MB and 50,000 requests); it is written to disk as it
    # arrives, so this bounds the disk, not memory.
    max_file_bytes: Annotated[int, msgspec.Meta(gt=0)] = 200 * 1024 * 1024
    max_lines: Annotated[int, msgspec.Meta(gt=0)] = 50_000
    # One line, at most (it is held in memory while it runs).
    max_line_bytes: Annotated[int, msgspec.Meta(gt=0)] = 8 * 1024 * 1024
    # A batch line's ledger row costs this times the live price (OpenAI's batch discount: half).
    price_factor: Annotated[float, msgspec.Meta(ge=0)] = 0.5
    # Lines one gateway runs at once, at most; fewer while interactive requests wait for a tier.
    concurrency: Annotated[int, msgspec.Meta(ge=1)] = 2
    # ... and only once no interactive request has been in flight for this long: an interactive
    # request that arrives while a line is in an engine step waits for that step, so lines keep
    # out of the short gaps between interactive requests (0: start in any gap).
    quiet_s: Annotated[float, msgspec.Meta(ge=0)] = 0.5
    # A claimed line whose gateway has not finished it in this long is taken again (it died).
    lease_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    # How often an idle runner looks for lines to run (and batches to finish).
    poll_s: Annotated[float, msgspec.Meta(gt=0)] = 0.5


def batch_store(engine: Engine, data: Path, settings: BatchSettings) -> BatchStore:
    """The store, its claims made under an id of this gateway's own (new at every start)."""
    files = FileStore(engine, data, settings.max_file_bytes, settings.max_lines)
    owner = secrets.token_hex(8)
    return BatchStore(engine, files, owner=owner, lease_s=settings.lease_s, max_line=settings.max_line_bytes)


__all__ = [
    "ACTIVE",
    "ENDPOINTS",
    "BatchRecord",
    "BatchSettings",
    "BatchStore",
    "FileRecord",
    "FileStore",
    "LineError",
    "LineJob",
    "Upload",
    "batch_store",
]
