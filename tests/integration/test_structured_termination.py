"""A constrained answer on the edge always ends: twenty schemas (tests/structured_cases.py) at
temperature 0 and 0.8 on the llama.cpp engine, each answer valid JSON of its schema that finishes with
``stop`` within 128 tokens, because what the schemas leave unbounded (digits, decimals, string lengths,
array lengths, free-form values) is bounded before decoding (tiers/edge/_grammar.py) and an answer near
its budget is wrapped up (tiers/edge/_decode.py; without a model: tests/tiers/edge/test_wrap_up.py).  ONNX Runtime:
tests/integration/test_edge_onnx.py."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema

from tests.conftest import Gateway
from tests.structured_cases import BUDGET, CASES, TEMPERATURES, response_format


def finish_every_case(gw: Gateway) -> list[str]:
    """Every case at every temperature; the failures, each said in a line."""
    failures = []
    headers = {"Authorization": f"Bearer {gw.api_key}", "Cache-Control": "no-store"}
    with httpx.Client(timeout=120) as client:
        for name, prompt, schema in CASES:
            for temperature in TEMPERATURES:
                body: dict[str, Any] = {
                    "model": "edge",
                    "messages": [{"role": "user", "content": prompt}],
                    "response_format": response_format(name, schema),
                    "max_tokens": BUDGET,
                    "temperature": temperature,
                    "seed": 7,
                }
                resp = client.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers)
                assert resp.status_code == 200, resp.text
                choice = resp.json()["choices"][0]
                text = choice["message"]["content"]
                if choice["finish_reason"] != "stop":
                    failures.append(f"{name} at {temperature}: {choice['finish_reason']}: {text[:120]!r}")
                    continue
                jsonschema.validate(json.loads(text), schema)
    return failures


def test_every_structured_answer_finishes_within_its_budget_on_llamacpp(gateway: Gateway) -> None:
    assert finish_every_case(gateway) == []
