"""One line of a batch's input file, read strictly, and the lines of its output and error files.

A line is OpenAI's ``{"custom_id": ..., "method": "POST", "url": <the batch's endpoint>, "body": {...}}``.
What is wrong with one line (not JSON, another method or URL, no ``custom_id``, one used before, a body
that is not an object, a stream asked for) is that line's error, reported in the batch's error file
with its line number; the other lines still run.  The body itself is checked by its endpoint when the
line runs, as a live request's is (a refused body is a line of the error file too).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/embeddings")


class LineError(msgspec.Struct, frozen=True, kw_only=True):
    code: str
    message: str
    line: int


class _Line(msgspec.Struct, forbid_unknown_fields=True):
    custom_id: str
    method: str
    url: str
    body: msgspec.Raw


class _Stream(msgspec.Struct):
    stream: bool | None = None


_line = msgspec.json.Decoder(_Line)
_stream = msgspec.json.Decoder(_Stream)
MAX_CUSTOM_ID = 512


def checked_line(raw: bytes, number: int, endpoint: str, seen: set[str]) -> tuple[str, bytes] | LineError:
    """(custom_id, body) of a good line; the error of a bad one.  ``seen``: the custom ids so far
    (this one is added)."""
    try:
        line = _line.decode(raw)
    except msgspec.ValidationError as exc:
        return LineError(code="invalid_request", message=f"line {number}: {exc}", line=number)
    except msgspec.DecodeError as exc:
        return LineError(code="invalid_json_line", message=f"line {number} is not JSON: {exc}", line=number)
    if not line.custom_id or len(line.custom_id) > MAX_CUSTOM_ID:
        message = f"line {number}: custom_id must be 1 to {MAX_CUSTOM_ID} characters"
        return LineError(code="missing_custom_id", message=message, line=number)
    if line.custom_id in seen:
        message = f"line {number}: custom_id {line.custom_id[:64]!r} is used by an earlier line"
        return LineError(code="duplicate_custom_id", message=message, line=number)
    seen.add(line.custom_id)
    if line.method != "POST":
        message = f"line {number}: method must be POST, not {line.method[:16]!r}"
        return LineError(code="invalid_method", message=message, line=number)
    if line.url != endpoint:
        message = f"line {number}: url must be the batch's endpoint {endpoint}, not {line.url[:64]!r}"
        return LineError(code="invalid_url", message=message, line=number)
    body = bytes(line.body)
    if not body.lstrip().startswith(b"{"):
        return LineError(code="invalid_body", message=f"line {number}: body must be an object", line=number)
    try:
        streamed = _stream.decode(body).stream
    except msgspec.ValidationError:
        streamed = None  # the endpoint names a malformed stream field when the line runs
    if streamed:
        message = f"line {number}: a batch line's answer is kept whole; stream must be false or absent"
        return LineError(code="invalid_body", message=message, line=number)
    return line.custom_id, body


def output_line(custom_id: str, status: int, request_id: str, body: bytes, error: LineError | None) -> bytes:
    """One line of the output or error file, in OpenAI's shape (plus the line number in ``error``)."""
    answer: dict[str, Any] = {
        "id": f"batch_req_{secrets.token_hex(12)}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": msgspec.Raw(body)},
        "error": msgspec.to_builtins(error) if error is not None else None,
    }
    return msgspec.json.encode(answer) + b"\n"


def refused_line(custom_id: str | None, error: LineError) -> bytes:
    """A line that never ran (refused when the batch was created): no response."""
    answer = {"id": f"batch_req_{secrets.token_hex(12)}", "custom_id": custom_id, "response": None}
    return msgspec.json.encode({**answer, "error": msgspec.to_builtins(error)}) + b"\n"


def custom_id_of(raw: bytes | None) -> str | None:
    """A refused line's custom_id, when it has a readable one (for the error file)."""
    if raw is None:
        return None
    try:
        found = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None
    value = found.get("custom_id") if isinstance(found, dict) else None
    return value[:MAX_CUSTOM_ID] if isinstance(value, str) else None


def chunked(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def line_rows(
    batch_id: str, lines: Iterator[bytes | None], endpoint: str, max_line: int
) -> Iterator[dict[str, Any]]:
    """The batch_lines rows of an input file's lines (None: a line over ``max_line``), numbered from 1;
    a blank line is skipped, a bad one is done already with its error."""
    seen: set[str] = set()
    for number, raw in enumerate(lines, start=1):
        if raw is not None and not raw.strip():
            continue
        checked: tuple[str, bytes] | LineError
        if raw is None:
            message = f"line {number} is over batch.max_line_bytes ({max_line} bytes)"
            checked = LineError(code="line_too_long", message=message, line=number)
        else:
            checked = checked_line(raw, number, endpoint, seen)
        row: dict[str, Any] = {"batch_id": batch_id, "line": number}
        if isinstance(checked, LineError):
            error = msgspec.json.encode(checked).decode()
            yield row | {"custom_id": custom_id_of(raw), "body": None, "state": "done", "error": error}
        else:
            # The same keys in every row: an insert of many rows takes the first row's columns.
            yield row | {
                "custom_id": checked[0],
                "body": checked[1].decode(),
                "state": "pending",
                "error": None,
            }
