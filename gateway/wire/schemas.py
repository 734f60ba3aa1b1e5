"""JSON schemas a client sends (tool parameters, ``response_format.json_schema``): checked at parse time,
cheaply and with bounds, so a malformed or hostile schema is a fast 400 and never reaches a tier.

A schema is refused when it is too big (nodes, properties, depth), is not a valid JSON schema (checked
against its meta-schema by jsonschema-rs), or refers to anything outside itself (a remote ``$ref``:
never fetched).  Whether a tier's constrained decoding can compile it is the tier's check.
"""

from __future__ import annotations

from typing import Any

import jsonschema_rs
import msgspec

from gateway.errors import InvalidRequest

MAX_NODES = 20_000  # JSON values in one schema
MAX_PROPERTIES = 2_000  # named properties, summed over the schema
MAX_DEPTH = 48
MAX_CHECKED = 512  # schemas remembered as valid (each a few KB at most: bounded by MAX_NODES)
CHECKED: set[tuple[bytes, bool]] = set()
_encode = msgspec.json.Encoder().encode


def _refuse_remote(uri: str) -> Any:
    raise ValueError(f"a schema may only refer to itself; {uri} is not fetched")


def _measure(schema: Any, param: str) -> None:
    nodes = properties = 0
    stack: list[tuple[Any, int]] = [(schema, 0)]
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise InvalidRequest(f"{param} is too large (over {MAX_NODES} JSON values)", param=param)
        if depth > MAX_DEPTH:
            raise InvalidRequest(f"{param} is nested deeper than {MAX_DEPTH} levels", param=param)
        if isinstance(value, dict):
            named = value.get("properties")
            if isinstance(named, dict):
                properties += len(named)
                if properties > MAX_PROPERTIES:
                    raise InvalidRequest(f"{param} has over {MAX_PROPERTIES} properties in all", param=param)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def check(schema: dict[str, Any], param: str, *, object_only: bool = False) -> None:
    """Raise :class:`InvalidRequest` (``param`` named) unless ``schema`` is a usable JSON schema;
    ``object_only``: it must describe an object (function parameters).

    A client sends the same tools with every request of a conversation: a schema checked once is
    remembered by its JSON text (:data:`CHECKED`), so repeats cost one encode and a dict lookup."""
    text = _encode(schema)
    if (text, object_only) in CHECKED:
        return
    _check(schema, param, object_only)
    if len(CHECKED) >= MAX_CHECKED:
        CHECKED.clear()  # bounded memory; a burst of new schemas only costs their checks again
    CHECKED.add((text, object_only))


def _check(schema: dict[str, Any], param: str, object_only: bool) -> None:
    _measure(schema, param)
    if object_only and schema.get("type", "object") != "object":
        raise InvalidRequest(
            f'{param} must be a JSON schema of type "object", not {schema.get("type")!r}', param=param
        )
    try:
        jsonschema_rs.validator_for(schema, retriever=_refuse_remote)
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        first = str(exc).split("\n", 1)[0]
        raise InvalidRequest(f"{param} is not a valid JSON schema: {first[:300]}", param=param) from exc


def validator(schema: dict[str, Any]) -> jsonschema_rs.Validator:
    """A validator for instances of an already checked ``schema``."""
    return jsonschema_rs.validator_for(schema, retriever=_refuse_remote)
