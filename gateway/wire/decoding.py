"""Decoding a request body strictly, and msgspec's validation errors as OpenAI's 400s (``param`` the
offending field's path, ``code`` OpenAI's name for what is wrong with it)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire import bounds
from gateway.wire.places import Place, place_of

T = TypeVar("T")
_PATH = re.compile(r"`\$\.?([^`]*)`")  # where msgspec says the error is: "... - at `$.messages[0]`"


def decode_error(exc: msgspec.ValidationError) -> InvalidRequest:
    """msgspec's validation error as OpenAI's 400: ``param`` the path of the offending field,
    ``code`` OpenAI's name for what is wrong with it (:func:`error_code`)."""
    text = str(exc)
    found = _PATH.search(text)
    param = found.group(1) or None if found else None
    code = error_code(text)
    if text.startswith(("Object missing required field", "Object contains unknown field")):
        field = text.split("`", 2)[1] if "`" in text else None
        param = f"{param}.{field}" if param and field else field
        if text.startswith("Object contains unknown field"):
            return InvalidRequest(f"Unrecognized request argument supplied: {param}", param=param, code=code)
    return InvalidRequest(f"invalid request: {text}", param=param, code=code)


# msgspec's wording of what is wrong -> the code OpenAI's API gives for it.
_CODES = (
    ("Object contains unknown field", "unknown_parameter"),
    ("Object missing required field", "missing_required_parameter"),
    ("Invalid enum value", "invalid_value"),
    ("Expected `int` >=", "integer_below_min_value"),
    ("Expected `int` <=", "integer_above_max_value"),
    ("Expected `float` >", "decimal_below_min_value"),
    ("Expected `float` <", "decimal_above_max_value"),
    ("Expected `str` of length >=", "string_below_min_length"),
    ("Expected `str` of length <=", "string_above_max_length"),
    ("Expected `str` matching regex", "invalid_value"),
    ("Expected `array` of length >=", "array_below_min_length"),
    ("Expected `array` of length <=", "array_above_max_length"),
    ("Expected `object` of length <=", "object_above_max_size"),
)


def error_code(text: str) -> str:
    """OpenAI's ``code`` for a msgspec validation message (``invalid_type`` for a wrong type, and
    ``invalid_value`` for anything else the types refuse)."""
    for start, code in _CODES:
        if text.startswith(start):
            return code
    return "invalid_type" if text.startswith("Expected `") and "got `" in text else "invalid_value"


def decode_body(decoder: msgspec.json.Decoder[T], body: bytes, what: str, place: Place | None = None) -> T:
    """Decode a request body strictly with ``decoder``; whatever is wrong is a 400 (``what``: the
    request's kind, for the message on an empty body).

    A body with many values is scanned against its bounds first (:mod:`gateway.wire.bounds`;
    ``place``: where its raw parts are decoded later, else read from the decoder's type), so a list
    over its bound is refused before it is built."""
    if not body:
        raise InvalidRequest(f"the request body is empty; send a JSON {what}")
    try:
        if _many_values(body):
            bounds.scan(body, place or place_of(cast(Any, decoder.type)))
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise decode_error(exc) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"the request body is not valid JSON: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"the request body is not valid UTF-8 (byte {exc.start})") from exc
    except RecursionError as exc:  # msgspec stops at the interpreter's recursion limit
        raise InvalidRequest("the request body's JSON is nested too deeply") from exc


SCAN_FROM = 20_000  # values: fewer cost ~1 ms and ~2 MiB decoded whole, so no scan is needed


def _many_values(body: bytes) -> bool:
    """Whether ``body`` may hold :data:`SCAN_FROM` values or more: each value but the first follows a
    comma or opens a container (a value takes 2 bytes at least, so a short body is not counted)."""
    if len(body) < 2 * SCAN_FROM:
        return False
    return body.count(b",") + body.count(b"[") + body.count(b"{") >= SCAN_FROM


OFF_LOOP_FROM = 256 << 10  # bytes: a body this large is decoded beside the event loop


async def decoded(parse: Callable[[bytes], T], body: bytes) -> T:
    """``parse(body)``, in a worker thread when the body is large: scanning and decoding a body of
    several MiB takes tens of milliseconds, which the event loop (and every other client, ``/healthz``
    included) would otherwise wait for; in a thread the interpreter hands the loop its turn every few
    milliseconds."""
    if len(body) < OFF_LOOP_FROM:
        return parse(body)
    return await asyncio.to_thread(parse, body)
