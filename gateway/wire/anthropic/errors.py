"""A Messages API body decoded strictly, its faults in Anthropic's words.

Anthropic validates a request with pydantic and says where the fault is with the field's path:
indices as numbers, and a union member's ``type`` after the index that chose it, e.g.
``messages.1.content.0.tool_use.toolset_name: Extra inputs are not permitted`` or
``tools.0.custom.defer_loading: ...``.  msgspec's errors (``... - at `$.messages[1].content[0]```) are
rewritten so, on the error path only (the body read a second time along the path alone, one level at
a time undecoded, to find the ``type`` of each object on it).  A block, source or caller of a type the
inventory refuses (:data:`gateway.wire.anthropic.fields.DECODE_REFUSALS`) gets the inventory's message.
"""

from __future__ import annotations

import re
from typing import TypeVar

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire.anthropic.fields import DECODE_REFUSALS
from gateway.wire.decoding import decode_body

T = TypeVar("T")
_AT = re.compile(r" - at `\$([^`]*)`$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_TAG = re.compile(r"^Invalid value '([^']*)'")
_INDEX = re.compile(r"\[(\d+)\]")
# The fields whose value is one of several types told apart by ``type`` (Anthropic names the member).
_UNIONS = frozenset(
    {"content", "tools", "source", "cache_control", "tool_choice", "thinking", "caller", "format"}
)


def decode_anthropic(decoder: msgspec.json.Decoder[T], body: bytes, what: str) -> T:
    try:
        return decode_body(decoder, body, what)
    except InvalidRequest as exc:
        cause = exc.__cause__
        if isinstance(cause, msgspec.ValidationError):
            raise anthropic_error(str(cause), body) from cause
        if exc.param:  # a bound the scan found (gateway/wire/bounds.py): its path as Anthropic writes one
            dotted = _INDEX.sub(r".\1", exc.param)
            raise InvalidRequest(exc.message.replace(exc.param, dotted), param=dotted, code=exc.code) from exc
        raise


def _steps(where: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _STEP.findall(where)]


_Object = msgspec.json.Decoder(dict[str, msgspec.Raw])
_Array = msgspec.json.Decoder(list[msgspec.Raw])


def _field(node: msgspec.Raw | bytes | None, key: str) -> msgspec.Raw | None:
    """``node[key]`` undecoded (one level read: a 16 MiB body is not built into objects to say where
    its fault is), or None where ``node`` is no object."""
    try:
        return _Object.decode(node).get(key) if node is not None else None
    except msgspec.MsgspecError:
        return None


def _item(node: msgspec.Raw | bytes | None, index: int) -> msgspec.Raw | None:
    try:
        items = _Array.decode(node) if node is not None else []
    except msgspec.MsgspecError:
        return None
    return items[index] if index < len(items) else None


def _text(node: msgspec.Raw | None) -> str | None:
    try:
        found = msgspec.json.decode(node) if node is not None else None
    except msgspec.MsgspecError:
        return None
    return found if isinstance(found, str) else None


def _path(steps: list[str | int], body: bytes, tag_last: bool = True) -> str:
    """``steps`` as Anthropic writes them, each union member's ``type`` after it."""
    out: list[str] = []
    node: msgspec.Raw | bytes | None = body
    key = ""
    for i, step in enumerate(steps):
        out.append(str(step))
        if isinstance(step, str):
            key = step
            node = _field(node, step)
        else:
            node = _item(node, step)
        if (tag_last or i < len(steps) - 1) and key in _UNIONS and node is not None:
            kind = _text(_field(node, "type")) or ("custom" if key == "tools" else None)
            if kind is not None and bytes(node).lstrip().startswith(b"{"):
                out.append(kind)
    return ".".join(out)


def anthropic_error(text: str, body: bytes) -> InvalidRequest:
    """msgspec's validation message ``text`` for ``body`` as Anthropic's 400."""
    found = _AT.search(text)
    what = text[: found.start()] if found else text
    steps = _steps(found.group(1)) if found else []
    model = _text(_field(body, "model")) or ""
    if what.startswith(("Object contains unknown field", "Object missing required field")):
        field = what.split("`", 2)[1]
        where = ".".join(filter(None, [_path(steps, body), field]))
        said = "Extra inputs are not permitted" if "unknown" in what else "Field required"
        return InvalidRequest(f"{where}: {said}", param=where)
    tag = _TAG.match(what)
    if tag and steps and steps[-1] == "type":
        where = _path(steps[:-1], body, tag_last=False)
        refused = DECODE_REFUSALS.get(tag.group(1))
        if refused is not None:
            message = refused.format(model=model[:256], tag=tag.group(1))
            return InvalidRequest(f"{where}: {message}", param=where, code="unsupported_value")
        said = f"Input tag '{tag.group(1)[:64]}' found using 'type' does not match any of the expected tags"
        return InvalidRequest(f"{where}: {said}", param=where)
    where = _path(steps, body)
    return InvalidRequest(f"{where}: {what}" if where else what, param=where or None)
