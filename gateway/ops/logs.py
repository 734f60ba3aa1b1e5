"""Logging: one JSON object per line (or plain text), each carrying the request id of the request
it was written for.

The id lives in a context variable (:data:`REQUEST_ID`) that the request middleware sets
(:mod:`gateway.ops.observe`); asyncio copies the context into every task a request starts,
so whatever logs on a request's behalf, in any module, gets its id without passing it.
A line written outside any request has no ``request_id`` key.

    {"ts": "2026-11-29T10:58:59.123Z", "level": "WARNING", "logger": "gateway.pipeline.answers.exact",
     "message": "result cache read failed, serving as a miss: ...", "request_id": "3f2a..."}

Fields given with ``extra={...}`` become keys of the object (the request log uses this).

Passwords in URLs never reach a line: ``redis://:secret@host`` and ``postgresql://user:secret@host``
are written ``redis://:***@host`` and ``postgresql://user:***@host``, and ``password=...`` query
parameters ``password=***``, in messages and exception text alike, whichever module logged them.
"""

from __future__ import annotations

import contextvars
import logging
import re
import sys
import time
from typing import Any, Literal

import msgspec

REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("tiergate_request_id", default=None)

# Attributes every LogRecord has: anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's copy of the message with terminal colours
    "rid",
}
LogFormat = Literal["json", "text"]

_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*):[^@/\s]*@")
_QUERY_PASSWORD = re.compile(r"(?P<head>[?&;](?:password|passwd|pwd)=)[^&\s#'\"]*", re.I)


def redact(text: str) -> str:
    """``text`` with the passwords of the URLs in it replaced by ``***``."""
    if "@" in text:
        text = _URL_PASSWORD.sub(r"\g<head>:***@", text)
    if "=" in text:
        text = _QUERY_PASSWORD.sub(r"\g<head>***", text)
    return text


class RequestIdFilter(logging.Filter):
    """Stamp each record with the current request's id (a handler filter: it runs in the
    thread and context that logged)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = REQUEST_ID.get()
        return True


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._encode = msgspec.json.Encoder(enc_hook=str).encode
        self._second = -1
        self._stamp = ""

    def _timestamp(self, created: float) -> str:
        second = int(created)
        if second != self._second:  # one strftime a second, not one a line
            self._second, self._stamp = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int((created - second) * 1000):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self._timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and value is not None:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return self._encode(entry).decode()


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s%(rid)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id", None)
        record.rid = f" [{rid}]" if rid else ""
        return redact(super().format(record))


def handler(fmt: LogFormat, stream: Any = None) -> logging.Handler:
    out = logging.StreamHandler(stream or sys.stderr)
    out.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    out.addFilter(RequestIdFilter())
    return out


def configure(fmt: LogFormat, level: str = "info") -> None:
    """Send every logger's records (uvicorn's too) to stderr in ``fmt``."""
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler(fmt))
    root.setLevel(level.upper())
    # Lines show none of these: skip collecting them (the logging HOWTO's optimisations).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
