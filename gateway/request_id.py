"""Request ids: every request gets one, every response carries it as ``X-Request-ID``.

The id is taken from the client's ``X-Request-ID`` when it is a sane token, else made
here, and kept in the ASGI scope so that handlers (which send it upstream) and
the response share it.  :func:`before_send` is an app-level hook, so errors and
unknown paths get the header too; it also counts answered chat requests by
tier and status.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable
from typing import Any

from litestar.types import Message, Scope

from gateway.metrics import Metrics

SCOPE_KEY = "tiergate.request_id"
_VALID = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")
_CHAT_PATH = "/v1/chat/completions"


def request_id(scope: Any) -> str:
    """This request's id, taken from the client or made on first use."""
    rid = scope.get(SCOPE_KEY)
    if rid is None:
        rid = (
            next(
                (
                    v.decode("ascii")
                    for k, v in scope["headers"]
                    if k == b"x-request-id" and _VALID.fullmatch(v)
                ),
                None,
            )
            or os.urandom(16).hex()  # random like a uuid4, without building a UUID
        )
        scope[SCOPE_KEY] = rid
    return str(rid)


def before_send(metrics: Metrics) -> Callable[[Message, Scope], Awaitable[None]]:
    async def add_request_id(message: Message, scope: Scope) -> None:
        if message["type"] != "http.response.start":
            return
        headers = list(message.get("headers", ()))
        headers.append((b"x-request-id", request_id(scope).encode("ascii")))
        message["headers"] = headers  # type: ignore[typeddict-unknown-key]
        if scope["path"] == _CHAT_PATH:
            tier = next((v for k, v in headers if k.lower() == b"x-tiergate-tier"), b"none")
            metrics.count_request(tier, message["status"])

    return add_request_id
