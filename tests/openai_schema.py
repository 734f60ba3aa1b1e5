"""Checking what tiergate returns against OpenAI's own description of its API.

``tests/data/openai-openapi.json`` is OpenAI's OpenAPI document, as published (3.4 MB, kept whole).
It says ``openapi: 3.1.0`` but is written in 3.0's dialect in places: ``nullable: true`` beside a
``type``, an ``enum``, a ``$ref`` or a combinator marks a value that may also be null, and
``exclusiveMinimum: true`` is a flag on ``minimum``. Each component schema is converted to JSON Schema
(Draft 2020-12) once, its ``$ref``s resolving within the converted document, and checked with
``jsonschema``::

    from tests.openai_schema import validate

    validate("CreateChatCompletionResponse", resp.json())
    validate("CreateChatCompletionStreamResponse", chunk)

A failure is an :class:`AssertionError` that names the path in the instance (``choices[0].delta.role``),
what the schema wanted there and the path in OpenAI's schema that said so.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import referencing
from jsonschema.exceptions import ValidationError
from referencing.jsonschema import DRAFT202012

DOCUMENT = Path(__file__).parent / "data" / "openai-openapi.json"
BASE_URI = "urn:openai-openapi"

# Keywords whose value is one subschema, a list of them, or a map of name → subschema.
_ONE = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "$defs", "dependentSchemas")

# The components the tests check; any other of the document's components works too.
CHAT_COMPLETION = "CreateChatCompletionResponse"
CHAT_COMPLETION_CHUNK = "CreateChatCompletionStreamResponse"
COMPLETION = "CreateCompletionResponse"
EMBEDDINGS = "CreateEmbeddingResponse"
RESPONSE = "Response"
RESPONSE_STREAM_EVENT = "ResponseStreamEvent"
MODELS = "ListModelsResponse"
MODEL = "Model"
ERROR = "ErrorResponse"


def to_json_schema(schema: Any) -> Any:
    """One OpenAPI schema object as JSON Schema 2020-12 (a new object; the argument is not changed)."""
    if not isinstance(schema, dict):
        return schema  # a boolean schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ONE and isinstance(value, dict):
            out[key] = to_json_schema(value)
        elif key in _LIST and isinstance(value, list):
            out[key] = [to_json_schema(v) for v in value]
        elif key in _MAP and isinstance(value, dict):
            out[key] = {name: to_json_schema(v) for name, v in value.items()}
        elif key == "nullable" or key.startswith("x-") or key in ("discriminator", "example"):
            continue
        else:
            out[key] = value
    # OpenAPI 3.0's boolean exclusive bounds
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if out.get(exclusive) is True and bound in out:
            out[exclusive] = out.pop(bound)
        elif out.get(exclusive) is False:
            del out[exclusive]
    if schema.get("nullable") is True:
        out = _or_null(out)
    return out


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    if any(k in schema for k in ("$ref", "allOf", "anyOf", "oneOf", "not", "const")):
        return {"anyOf": [schema, {"type": "null"}]}
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str) and kind != "null":
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    if "enum" in out and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out  # without a type or an enum, null was allowed already


@functools.cache
def _registry() -> referencing.Registry[Any]:
    document = json.loads(DOCUMENT.read_text())
    schemas = document["components"]["schemas"]
    converted = {"components": {"schemas": {name: to_json_schema(s) for name, s in schemas.items()}}}
    resource: referencing.Resource[Any] = DRAFT202012.create_resource(converted)
    registry: referencing.Registry[Any] = referencing.Registry().with_resource(BASE_URI, resource)
    return registry


def component_names() -> list[str]:
    contents = _registry().contents(BASE_URI)
    return sorted(contents["components"]["schemas"])


@functools.cache
def validator(component: str) -> jsonschema.Draft202012Validator:
    """The compiled validator of one of the document's component schemas (cached)."""
    if component not in component_names():
        raise KeyError(f"OpenAI's document has no component schema {component!r}")
    schema = {"$ref": f"{BASE_URI}#/components/schemas/{component}"}
    return jsonschema.Draft202012Validator(schema, registry=_registry())


def path_of(error: ValidationError) -> str:
    """Where in the instance: ``choices[0].message.tool_calls[0].id``; ``(top level)`` for the root."""
    out = ""
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "(top level)"


def _describe(error: ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_schema_path)
    return f"{path_of(error)}: {error.message}  (schema: {where})"


def errors(component: str, instance: Any) -> list[str]:
    """Every violation, most relevant first, one line each (empty when the instance is valid)."""
    found = sorted(validator(component).iter_errors(instance), key=lambda e: list(e.absolute_path))
    return [_describe(_closest(error)) for error in found]


def _closest(error: ValidationError) -> ValidationError:
    """Into anyOf/oneOf: the branch that got furthest (not the ``null`` one a nullable value adds)."""
    while error.context:
        here = list(error.absolute_path)
        branches = [e for e in error.context if not (e.validator == "type" and list(e.absolute_path) == here)]
        error = max(branches or error.context, key=lambda e: len(e.absolute_path))
    return error


def validate(component: str, instance: Any) -> None:
    """Raise an AssertionError, naming each failing path, unless ``instance`` is valid for ``component``.

    ``instance`` is decoded JSON; pydantic models (the ``openai`` client's) are dumped first as their
    JSON would be (``exclude_unset``: a field the server did not send stays absent)."""
    instance = _as_json(instance)
    problems = errors(component, instance)
    if problems:
        shown = json.dumps(instance)[:600]
        raise AssertionError(
            f"not a valid OpenAI {component}:\n  " + "\n  ".join(problems[:12]) + f"\ninstance: {shown}"
        )


def _as_json(instance: Any) -> Any:
    to_dict = getattr(instance, "to_dict", None)  # the openai client's models: wire names, as sent
    if callable(to_dict):
        return to_dict(mode="json")
    dump = getattr(instance, "model_dump", None)
    if callable(dump):
        return dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(instance, Mapping):
        return {k: _as_json(v) for k, v in instance.items()}
    if isinstance(instance, list | tuple):
        return [_as_json(v) for v in instance]
    return instance


__all__ = [
    "CHAT_COMPLETION",
    "CHAT_COMPLETION_CHUNK",
    "COMPLETION",
    "EMBEDDINGS",
    "ERROR",
    "MODEL",
    "MODELS",
    "RESPONSE",
    "RESPONSE_STREAM_EVENT",
    "component_names",
    "errors",
    "to_json_schema",
    "validate",
    "validator",
]
