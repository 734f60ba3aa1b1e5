"""Twenty JSON schemas of the kinds clients send for structured output (integers, numbers, nested
objects, arrays, enums, nullable and free-form values), each with a prompt, for checking that a
constrained answer on the edge always finishes (``tests/integration/test_structured_termination.py``,
and on ONNX Runtime in ``tests/integration/test_edge_onnx.py``)."""

from __future__ import annotations

from typing import Any

BUDGET = 128  # max_tokens: every answer must finish with "stop" within it
TEMPERATURES = (0.0, 0.8)


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties) if required is None else required,
        "additionalProperties": False,
    }


INT = {"type": "integer"}
NUM = {"type": "number"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}

CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "city",
        "Name a big city, its country and its population.",
        _object({"name": STR, "country": STR, "population": INT}),
    ),
    ("age", "How old is the Eiffel Tower in years?", _object({"years": INT})),
    ("price", "What does a coffee cost in Paris, in euros?", _object({"euros": NUM})),
    ("point", "Give the latitude and longitude of Rome.", _object({"lat": NUM, "lon": NUM})),
    (
        "counts",
        "Count the legs of a cat, a bird and a spider.",
        _object({"cat": INT, "bird": INT, "spider": INT}),
    ),
    ("primes", "List the first prime numbers.", _object({"primes": {"type": "array", "items": INT}})),
    ("colours", "Name some colours of the rainbow.", _object({"colours": {"type": "array", "items": STR}})),
    (
        "mood",
        "Is this review positive or negative: 'I loved it'?",
        _object({"label": {"enum": ["positive", "negative", "neutral"]}}),
    ),
    ("yesno", "Is water wet?", _object({"answer": BOOL, "why": STR})),
    (
        "person",
        "Describe a fictional person with an address.",
        _object({"name": STR, "age": INT, "address": _object({"street": STR, "city": STR, "zip": STR})}),
    ),
    (
        "temperature",
        "What is the temperature on Mars in Celsius?",
        _object({"celsius": NUM, "unit": {"const": "C"}}),
    ),
    (
        "scores",
        "Give three test scores between 0 and 100.",
        _object({"scores": {"type": "array", "items": NUM}}),
    ),
    (
        "maybe",
        "What is the middle name of Ada Lovelace, if any?",
        _object({"middle": {"type": ["string", "null"]}}),
    ),
    (
        "inventory",
        "List two fruits with how many are in stock.",
        _object({"items": {"type": "array", "items": _object({"fruit": STR, "count": INT})}}),
    ),
    (
        "rating",
        "Rate the film Inception from 1 to 5 stars.",
        _object({"stars": {"type": "integer", "minimum": 1, "maximum": 5}}),
    ),
    ("distance", "How far is the Moon from the Earth in kilometres?", _object({"km": NUM})),
    ("year", "In which year did humans land on the Moon?", _object({"year": INT, "mission": STR})),
    (
        "matrix",
        "Write a small 2 by 2 matrix of integers.",
        _object({"rows": {"type": "array", "items": {"type": "array", "items": INT}}}),
    ),
    ("freeform", "Describe a book as JSON.", {"type": "object"}),
    (
        "nested",
        "Give a company with its founder and founding year.",
        _object({"company": STR, "founder": _object({"name": STR, "born": INT}), "founded": INT}),
    ),
]


def response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}
