"""Files for batches (OpenAI's Files API, ``purpose=batch``), per tenant, on the data folder.

An upload is written to disk as it arrives (:class:`Upload`: a few KiB in memory at a time, whatever
the file's size), counted in bytes and lines against ``[batch]``'s limits, and only then given a row;
a file's bytes are read back in chunks.  Another tenant's file is a 404, as an unknown one is.
Blocking: callers on the event loop run these in a thread (the upload's writes are page-cache
writes of the chunks the server hands over).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec
from sqlalchemy import Engine, and_, delete, insert, or_, select

from gateway.accounts.storage import batch_files
from gateway.errors import InvalidRequest, NotFound, PayloadTooLarge

CHUNK = 64 * 1024


class FileRecord(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    tenant: str
    purpose: str
    filename: str
    bytes: int
    lines: int
    created_at: float
    path: str


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


class Upload:
    """One file being received: written to a temporary file as it comes, bounded."""

    def __init__(self, folder: Path, max_bytes: int, max_lines: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.id = new_file_id()
        self.temp = folder / f".{self.id}.part"
        self._out = self.temp.open("wb")
        self._max_bytes, self._max_lines = max_bytes, max_lines
        self.bytes = self.newlines = 0
        self._last = b"\n"

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.bytes += len(data)
        if self.bytes > self._max_bytes:
            raise PayloadTooLarge(f"the file is over batch.max_file_bytes ({self._max_bytes} bytes)")
        self.newlines += data.count(b"\n")
        self._last = data[-1:]
        if self.lines > self._max_lines:
            raise InvalidRequest(f"the file has over batch.max_lines ({self._max_lines}) lines", param="file")
        self._out.write(data)

    @property
    def lines(self) -> int:
        return self.newlines + (self._last != b"\n")

    def finish(self, final: Path) -> None:
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        self.temp.replace(final)

    def discard(self) -> None:
        self._out.close()
        with contextlib.suppress(FileNotFoundError):
            self.temp.unlink()


class FileStore:
    def __init__(self, engine: Engine, data: Path, max_bytes: int, max_lines: int) -> None:
        self._engine = engine
        self._data = data
        self.folder = data / "files"
        self._max_bytes, self._max_lines = max_bytes, max_lines

    def upload(self) -> Upload:
        return Upload(self.folder, self._max_bytes, self._max_lines)

    def keep(self, upload: Upload, tenant: str, filename: str, purpose: str) -> FileRecord:
        """The upload, in place and recorded as the tenant's."""
        final = self.folder / upload.id
        upload.finish(final)
        record = FileRecord(
            id=upload.id,
            tenant=tenant,
            purpose=purpose,
            filename=filename[:256],
            bytes=upload.bytes,
            lines=upload.lines,
            created_at=time.time(),
            path=str(final.relative_to(self._data)),
        )
        with self._engine.begin() as conn:
            conn.execute(insert(batch_files).values(**msgspec.structs.asdict(record)))
        return record

    def written(self, file_id: str, tenant: str, filename: str, lines: Iterable[bytes]) -> FileRecord | None:
        """A file the gateway writes (a batch's output or errors) under a given id, None when it has
        no line: written whole again if it was begun before (by a finalizing gateway that died),
        recorded once."""
        with self._engine.connect() as conn:
            row = conn.execute(select(batch_files).where(batch_files.c.id == file_id)).first()
        if row is not None:
            return FileRecord(**row._asdict())
        upload = Upload(self.folder, 1 << 62, 1 << 62)
        upload.id = file_id
        try:
            for line in lines:
                upload.write(line)
        except BaseException:
            upload.discard()
            raise
        if not upload.bytes:
            upload.discard()
            return None
        return self.keep(upload, tenant, filename, "batch_output")

    def get(self, tenant: str, file_id: str) -> FileRecord:
        with self._engine.connect() as conn:
            row = conn.execute(
                select(batch_files).where(and_(batch_files.c.id == file_id, batch_files.c.tenant == tenant))
            ).first()
        if row is None:
            raise NotFound(f"No such File object: {file_id[:64]}", param="id")
        return FileRecord(**row._asdict())

    def listed(
        self, tenant: str, purpose: str | None, limit: int, after: str | None, ascending: bool
    ) -> tuple[list[FileRecord], bool]:
        """A page of the tenant's files, newest first unless ``ascending``; and whether more follow."""
        c = batch_files.c
        query = select(batch_files).where(c.tenant == tenant)
        if purpose:
            query = query.where(c.purpose == purpose)
        if after:
            mark = self.get(tenant, after)
            same = and_(c.created_at == mark.created_at, c.id > mark.id if ascending else c.id < mark.id)
            beyond = c.created_at > mark.created_at if ascending else c.created_at < mark.created_at
            query = query.where(or_(beyond, same))
        order = (c.created_at.asc(), c.id.asc()) if ascending else (c.created_at.desc(), c.id.desc())
        with self._engine.connect() as conn:
            rows = conn.execute(query.order_by(*order).limit(limit + 1)).all()
        return [FileRecord(**r._asdict()) for r in rows[:limit]], len(rows) > limit

    def present(self, record: FileRecord) -> bool:
        return (self._data / record.path).is_file()

    def chunks(self, record: FileRecord) -> Iterator[bytes]:
        with (self._data / record.path).open("rb") as f:
            while chunk := f.read(CHUNK):
                yield chunk

    def lines(self, record: FileRecord, max_line: int) -> Iterator[bytes | None]:
        """The file's lines (without their newline); None for a line over ``max_line`` bytes (read
        past in bounded pieces, never whole)."""
        with (self._data / record.path).open("rb") as f:
            while line := f.readline(max_line + 1):
                if len(line) > max_line and not line.endswith(b"\n"):
                    while (rest := f.readline(CHUNK)) and not rest.endswith(b"\n"):
                        pass
                    yield None
                    continue
                yield line.rstrip(b"\r\n")

    def delete(self, tenant: str, file_id: str) -> None:
        record = self.get(tenant, file_id)
        with self._engine.begin() as conn:
            conn.execute(delete(batch_files).where(batch_files.c.id == record.id))
        with contextlib.suppress(FileNotFoundError):
            (self._data / record.path).unlink()
