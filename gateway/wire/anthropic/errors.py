"""A Messages API body decoded strictly, its faults in Anthropic's words.

Anthropic validates a request with pydantic and says where the fault is with the field's path:
indices as numbers, and a union member's ``type`` after the index that chose it, e.g.
``messages.1.content.0.tool_use.toolset_name: Extra inputs are not permitted`` or
``tools.0.custom.defer_loading: ...``.  msgspec's errors (``... - at `$.messages[1].content[0]```) are
rewritten so, on the error path only (the body decoded a second time, generically, to read the
``type`` of each object on the path).  A block, source or caller of a type the inventory refuses
(:data:`gateway.wire.anthropic.fields.DECODE_REFUSALS`) gets the inventory's message.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from gateway.errors import InvalidRequest
from gateway.wire.anthropic.fields import DECODE_REFUSALS
from gateway.wire.decoding import decode_body

T = TypeVar("T")
_AT = re.compile(r" - at `\$([^`]*)`$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")
_TAG = re.compile(r"^Invalid value '([^']*)'")
# The fields whose value is one of several types told apart by ``type`` (Anthropic names the member).
_UNIONS = frozenset(
    {"content", "tools", "source", "cache_control", "tool_choice", "thinking", "caller", "format"}
)


def decode_anthropic(decoder: msgspec.json.Decoder[T], body: bytes, what: str) -> T:
    try:
        return decode_body(decoder, body, what)
    except InvalidRequest as exc:
        cause = exc.__cause__
        if not isinstance(cause, msgspec.ValidationError):
            raise
        raise anthropic_error(str(cause), body) from cause


def _steps(where: str) -> list[str | int]:
    return [name if name else int(index) for name, index in _STEP.findall(where)]


def _path(steps: list[str | int], body: Any, tag_last: bool = True) -> str:
    """``steps`` as Anthropic writes them, each union member's ``type`` after it."""
    out: list[str] = []
    node, key = body, ""
    for i, step in enumerate(steps):
        out.append(str(step))
        if isinstance(step, str):
            key = step
        node = node.get(step) if isinstance(node, dict) and isinstance(step, str) else _item(node, step)
        tag_here = tag_last or i < len(steps) - 1
        if tag_here and key in _UNIONS and isinstance(node, dict):
            kind = node.get("type", "custom" if key == "tools" else None)
            if isinstance(kind, str):
                out.append(kind)
    return ".".join(out)


def _item(node: Any, step: str | int) -> Any:
    return node[step] if isinstance(node, list) and isinstance(step, int) and step < len(node) else None


def anthropic_error(text: str, body: bytes) -> InvalidRequest:
    """msgspec's validation message ``text`` for ``body`` as Anthropic's 400."""
    found = _AT.search(text)
    what = text[: found.start()] if found else text
    steps = _steps(found.group(1)) if found else []
    try:
        doc: Any = msgspec.json.decode(body)
    except msgspec.DecodeError:
        doc = None
    model = doc.get("model") if isinstance(doc, dict) else None
    if what.startswith(("Object contains unknown field", "Object missing required field")):
        field = what.split("`", 2)[1]
        where = ".".join(filter(None, [_path(steps, doc), field]))
        said = "Extra inputs are not permitted" if "unknown" in what else "Field required"
        return InvalidRequest(f"{where}: {said}", param=where)
    tag = _TAG.match(what)
    if tag and steps and steps[-1] == "type":
        where = _path(steps[:-1], doc, tag_last=False)
        refused = DECODE_REFUSALS.get(tag.group(1))
        if refused is not None:
            message = refused.format(model=str(model)[:256], tag=tag.group(1))
            return InvalidRequest(f"{where}: {message}", param=where, code="unsupported_value")
        said = f"Input tag '{tag.group(1)[:64]}' found using 'type' does not match any of the expected tags"
        return InvalidRequest(f"{where}: {said}", param=where)
    where = _path(steps, doc)
    return InvalidRequest(f"{where}: {what}" if where else what, param=where or None)
