"""Cost tags: ``key=value`` pairs on a ledger row, from the request's ``metadata`` and the
``X-Tiergate-Tags`` header, for cost reports (and filters) by team, feature or user.

The header is a comma-separated list of pairs: ``X-Tiergate-Tags: team=search, feature=autocomplete``.
A key is 1–64 letters, digits or ``_ . - : /``; a value is 1–128 characters with no comma and no
control character (spaces around keys and values are dropped). At most 16 tags. A header that breaks
any of this is refused (400, naming it), never cut to fit.

Every ``metadata`` pair whose key is a valid tag key and whose value is 1–128 characters is a tag
too (other pairs stay in the row's ``metadata`` only). The header wins where both name a key; the
two together may name at most 16 keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import msgspec

from gateway.errors import InvalidRequest

HEADER = "x-tiergate-tags"
MAX_TAGS = 16
MAX_KEY = 64
MAX_VALUE = 128
KEY = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")
_BAD_VALUE = re.compile(r"[\x00-\x1f\x7f,]")
_PARAM = "X-Tiergate-Tags"

Tags = dict[str, str]


def valid_key(key: str) -> bool:
    return KEY.fullmatch(key) is not None


def valid_value(value: str) -> bool:
    return 0 < len(value) <= MAX_VALUE and _BAD_VALUE.search(value) is None


def parse_header(text: str) -> Tags:
    """The tags an ``X-Tiergate-Tags`` header names (as the ASGI server decoded it: latin-1).
    Raises :class:`InvalidRequest` naming the header."""
    try:
        text = text.encode("latin-1").decode("utf-8")
    except UnicodeError as exc:
        raise InvalidRequest(f"{_PARAM} must be UTF-8", param=_PARAM) from exc
    tags: Tags = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq:
            raise InvalidRequest(f"{_PARAM}: {item.strip()[:80]!r} is not key=value", param=_PARAM)
        if not valid_key(key):
            raise InvalidRequest(
                f"{_PARAM}: tag key {key[:80]!r} must be 1-{MAX_KEY} letters, digits or _ . - : /",
                param=_PARAM,
            )
        if not valid_value(value):
            raise InvalidRequest(
                f"{_PARAM}: the value of {key!r} must be 1-{MAX_VALUE} characters, "
                "with no comma or control character",
                param=_PARAM,
            )
        if key in tags:
            raise InvalidRequest(f"{_PARAM} names {key!r} twice", param=_PARAM)
        tags[key] = value
        if len(tags) > MAX_TAGS:
            raise InvalidRequest(f"{_PARAM} names more than {MAX_TAGS} tags", param=_PARAM)
    return tags


def request_tags(metadata: Mapping[str, str] | None, header: str | None) -> Tags:
    """A request's tags: its metadata pairs that fit, then the header's (which win)."""
    tags: Tags = {k: v for k, v in (metadata or {}).items() if valid_key(k) and valid_value(v)}
    if header:
        tags.update(parse_header(header))
        if len(tags) > MAX_TAGS:
            raise InvalidRequest(
                f"metadata and {_PARAM} together name more than {MAX_TAGS} tags", param=_PARAM
            )
    return tags


def encode_tags(tags: Tags) -> str | None:
    """Tags as the ledger row keeps them: JSON, keys sorted; None for none."""
    return msgspec.json.encode(dict(sorted(tags.items()))).decode() if tags else None


_decode = msgspec.json.Decoder(dict[str, str]).decode


def decode_tags(text: str | None) -> Tags:
    return _decode(text) if text else {}


def parse_filter(text: str, param: str = "tag") -> tuple[str, str]:
    """A report's tag filter, ``key=value``; 400 naming ``param`` if it is not one."""
    key, eq, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not eq or not valid_key(key) or not value or len(value) > MAX_VALUE:
        raise InvalidRequest(f"{param} must be key=value (team=search), not {text[:80]!r}", param=param)
    return key, value
