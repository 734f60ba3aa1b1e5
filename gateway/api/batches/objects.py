"""The Files and Batch APIs' objects in OpenAI's shapes (``FileObject``, ``Batch``, their list pages),
and the requests' own: a batch to create, a page to list."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from gateway.accounts.batches import BatchRecord, FileRecord

# What OpenAI's Files API takes; this gateway keeps files for batches only.
PURPOSES = ("assistants", "batch", "fine-tune", "vision", "user_data", "evals")
MetadataKey = Annotated[str, msgspec.Meta(max_length=64)]
MetadataValue = Annotated[str, msgspec.Meta(max_length=512)]


class CreateBatch(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    input_file_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    endpoint: str
    completion_window: Literal["24h"]
    metadata: Annotated[dict[MetadataKey, MetadataValue], msgspec.Meta(max_length=16)] | None = None


class FilePage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    purpose: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 10_000
    order: Literal["asc", "desc"] = "desc"
    after: str | None = None


class BatchPage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    limit: Annotated[int, msgspec.Meta(ge=1, le=100)] = 20
    after: str | None = None


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": int(record.created_at),
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",  # deprecated in OpenAI's API; what it says of a file ready for use
    }


def _at(value: float | None) -> int | None:
    return int(value) if value is not None else None


def batch_object(record: BatchRecord) -> dict[str, Any]:
    errors = None
    if record.errors:
        data = [{k: v for k, v in e.items() if v} for e in record.errors]  # line 0: the file as a whole
        errors = {"object": "list", "data": data}
    # OpenAI's description has no nulls in a Batch but its metadata's: a time not reached is left out.
    body: dict[str, Any] = {
        "id": record.id,
        "object": "batch",
        "endpoint": record.endpoint,
        "errors": errors,
        "input_file_id": record.input_file_id,
        "completion_window": "24h",
        "status": record.status,
        "output_file_id": record.output_file_id,
        "error_file_id": record.error_file_id,
        "created_at": int(record.created_at),
        "in_progress_at": _at(record.in_progress_at),
        "expires_at": _at(record.expires_at),
        "finalizing_at": _at(record.finalizing_at),
        "completed_at": _at(record.completed_at),
        "failed_at": _at(record.failed_at),
        "expired_at": _at(record.expired_at),
        "cancelling_at": _at(record.cancelling_at),
        "cancelled_at": _at(record.cancelled_at),
        "request_counts": {"total": record.total, "completed": record.completed, "failed": record.failed},
    }
    return {k: v for k, v in body.items() if v is not None} | {"metadata": record.metadata}


def page(data: Sequence[dict[str, Any]], more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": list(data),
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": more,
    }
