"""Request ids: every request gets one, every response carries it as ``X-Request-ID``.

The id is taken from the client's ``X-Request-ID`` when it is a sane token, else made
here, and kept in the ASGI scope so that handlers (which send it upstream) and
the response share it.  :mod:`gateway.ops.observe` puts it in the log context and on
every response (an app-level hook, so errors and unknown paths get it too).
"""

from __future__ import annotations

import os
import re
from typing import Any

SCOPE_KEY = "tiergate.request_id"
_VALID = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")


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
