"""What a schema leaves unbounded is bounded before the edge compiles it (tiers/edge/_bounds.py), and
what it bounds itself is left as it is; llguidance then refuses what the bounds exclude."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.tiers.edge.test_grammar import accepts, schema
from tiers.edge._grammar import ANY_VALUE, DECIMALS, MAX_ITEMS, MAX_MAGNITUDE, MAX_STRING, bounded


def test_unbounded_values_get_bounds_and_the_clients_schema_is_not_changed() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "x": {"type": ["number", "null"]},
            "s": {"type": "string"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "free": {"type": "object"},
        },
        "$defs": {"inner": {"type": "integer"}},
    }
    before = copy.deepcopy(schema)
    out = bounded(schema)
    assert schema == before
    props = out["properties"]
    assert props["n"] == {"type": "integer", "minimum": -MAX_MAGNITUDE, "maximum": MAX_MAGNITUDE}
    assert props["x"]["multipleOf"] == DECIMALS and props["x"]["maximum"] == MAX_MAGNITUDE
    assert props["s"]["maxLength"] == MAX_STRING
    assert props["tags"]["maxItems"] == MAX_ITEMS and props["tags"]["items"]["maxLength"] == MAX_STRING
    assert props["free"]["additionalProperties"] == ANY_VALUE
    assert out["additionalProperties"] is False  # named properties only, as strict outputs have
    assert out["$defs"]["inner"]["maximum"] == MAX_MAGNITUDE


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 1, "maximum": 5},
        {"type": "number", "multipleOf": 0.5, "exclusiveMinimum": 0, "exclusiveMaximum": 10},
        {"type": "string", "maxLength": 300},
        {"type": "string", "pattern": "^[a-z]+$"},
        {"type": "string", "format": "date"},
        {"enum": ["a", "b"]},
        {"const": 3},
        {"$ref": "#/$defs/x"},
        {"type": "array", "maxItems": 50},
        {"type": "object", "properties": {}, "additionalProperties": True},
    ],
)
def test_what_a_schema_bounds_itself_is_kept(schema: dict[str, Any]) -> None:
    out = bounded(schema)
    for key, value in schema.items():
        if key != "additionalProperties":
            assert out[key] == value
    if schema.get("additionalProperties") is True:
        assert out["additionalProperties"] == ANY_VALUE


def test_the_edge_grammar_refuses_what_the_bounds_exclude() -> None:
    """Through the edge's own grammar (grammar_of), fed byte by byte."""
    assert accepts(schema({"type": "integer"}), "123456789012345")
    assert not accepts(schema({"type": "integer"}), "1234567890123456")
    assert accepts(schema({"type": "number"}), "0.125")
    assert not accepts(schema({"type": "number"}), "0.1234567")
    assert accepts(schema({"type": "string"}), json.dumps("x" * MAX_STRING))
    assert not accepts(schema({"type": "string"}), json.dumps("x" * (MAX_STRING + 1)))
    assert not accepts(schema({"type": "array"}), json.dumps(list(range(MAX_ITEMS + 1))))
    assert accepts(schema({"type": "object"}), '{"a": [1, 2], "b": {"c": null}}')
