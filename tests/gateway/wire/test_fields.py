"""The field inventory (gateway/wire/fields.py) against OpenAI's spec and the wire shapes: every field
of the spec's request schemas is listed, every listed field is decoded, every refused one gets the
error the inventory names, and a nullable field sent as null is the field left out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway.errors import InvalidRequest
from gateway.wire import audio, fields
from gateway.wire.chat import ChatCompletionRequest, parse_chat_request
from gateway.wire.completions import CompletionRequest, parse_completions
from gateway.wire.embeddings import EmbeddingRequest, parse_embedding_request
from gateway.wire.responses import ResponsesRequest, parse_responses_request
from tests.gateway.wire.test_audio_form import CT, form
from tests.openai_schema import DOCUMENT

SPEC = json.loads(DOCUMENT.read_text())["components"]["schemas"]
SHAPES: dict[str, type[msgspec.Struct]] = {
    "CreateChatCompletionRequest": ChatCompletionRequest,
    "CreateResponse": ResponsesRequest,
    "CreateCompletionRequest": CompletionRequest,
    "CreateEmbeddingRequest": EmbeddingRequest,
}
CHAT = {"model": "edge", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES = {"model": "edge", "input": "hi"}
# A value of each refused field as OpenAI's clients send it.
REFUSED_SAMPLES: dict[str, Any] = {
    "audio": {"voice": "alloy", "format": "wav"},
    "web_search_options": {},
    "prediction": {"type": "content", "content": "hi"},
    "moderation": {"model": "omni-moderation-latest"},
    "functions": [{"name": "f", "parameters": {"type": "object"}}],
    "function_call": "auto",
    "prompt": {"id": "pmpt_123"},
    "conversation": "conv_123",
    "context_management": [{"type": "compaction"}],
}


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = SPEC[schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def spec_fields(name: str) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}

    def walk(schema: dict[str, Any]) -> None:
        schema = _resolve(schema)
        for part in schema.get("allOf", []):
            walk(part)
        found.update(schema.get("properties", {}))

    walk(SPEC[name])
    return found


def nullable(schema: dict[str, Any]) -> bool:
    schema = _resolve(schema) if "$ref" in schema and len(schema) == 1 else schema
    return bool(schema.get("nullable")) or any(
        _resolve(s).get("type") == "null" for s in schema.get("anyOf", []) + schema.get("oneOf", [])
    )


@pytest.mark.parametrize("schema", list(fields.INVENTORY))
def test_the_inventory_lists_every_field_of_the_spec_and_no_other(schema: str) -> None:
    assert set(fields.INVENTORY[schema]) == set(spec_fields(schema))


@pytest.mark.parametrize("schema", list(SHAPES))
def test_every_listed_field_is_decoded_and_every_refused_one_kept_raw(schema: str) -> None:
    shape = {f.name: f.type for f in msgspec.structs.fields(SHAPES[schema])}
    for name, entry in fields.INVENTORY[schema].items():
        assert name in shape, f"{schema}.{name} is listed but the wire shape does not take it"
        raw = shape[name] == msgspec.Raw | msgspec.UnsetType
        assert raw == isinstance(entry, fields.Refused), name


def _refused(schema: str) -> list[tuple[str, str]]:
    return [(schema, n) for n, e in fields.INVENTORY[schema].items() if isinstance(e, fields.Refused)]


@pytest.mark.parametrize(
    ("schema", "name"), _refused("CreateChatCompletionRequest") + _refused("CreateResponse")
)
def test_a_refused_field_gets_openais_error_and_null_is_left_out(schema: str, name: str) -> None:
    entry = fields.INVENTORY[schema][name]
    assert isinstance(entry, fields.Refused)
    base, parse = (
        (CHAT, parse_chat_request) if schema == "CreateChatCompletionRequest" else (RESPONSES, _responses)
    )
    with pytest.raises(InvalidRequest) as refused:
        parse(json.dumps({**base, name: REFUSED_SAMPLES[name]}).encode())
    error = refused.value
    assert (error.status, error.type, error.code, error.param) == (
        400,
        "invalid_request_error",
        entry.code,
        name,
    )
    assert error.message == entry.message
    assert parse(json.dumps({**base, name: None}).encode()) == parse(json.dumps(base).encode())


def _responses(body: bytes) -> ResponsesRequest:
    return parse_responses_request(body)[0]


@pytest.mark.parametrize(
    ("schema", "base", "parse"),
    [
        ("CreateChatCompletionRequest", CHAT, parse_chat_request),
        ("CreateResponse", RESPONSES, _responses),
        ("CreateEmbeddingRequest", {"model": "m", "input": "hi"}, parse_embedding_request),
        ("CreateCompletionRequest", {"model": "m", "prompt": "hi"}, parse_completions),
    ],
)
def test_every_nullable_field_sent_as_null_is_the_field_left_out(
    schema: str, base: dict[str, Any], parse: Any
) -> None:
    left_out = parse(json.dumps(base).encode())
    for name, spec in spec_fields(schema).items():
        if name in base or not nullable(spec):
            continue
        assert parse(json.dumps({**base, name: None}).encode()) == left_out, name


@pytest.mark.parametrize(
    ("extra", "code", "param"),
    [
        ({"temperature": 5}, "decimal_above_max_value", "temperature"),
        ({"temperature": -1}, "decimal_below_min_value", "temperature"),
        ({"n": 0}, "integer_below_min_value", "n"),
        ({"top_logprobs": 21, "logprobs": True}, "integer_above_max_value", "top_logprobs"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "array_above_max_length", "stop"),
        ({"tool_choice": "sometimes"}, "invalid_value", "tool_choice"),
        ({"reasoning_effort": "extreme"}, "invalid_value", "reasoning_effort"),
        ({"safety_identifier": "x" * 65}, "string_above_max_length", "safety_identifier"),
        ({"messages": []}, "array_below_min_length", "messages"),
        ({"seed": "one"}, "invalid_type", "seed"),
        ({"not_a_field": 1}, "unknown_parameter", "not_a_field"),
        ({"verbosity": "low"}, "unsupported_value", "verbosity"),
        ({"modalities": ["text", "audio"]}, "unsupported_value", "modalities"),
        ({"prompt_cache_retention": "24h"}, "unsupported_value", "prompt_cache_retention"),
        ({"prompt_cache_options": {"mode": "explicit"}}, "unsupported_value", "prompt_cache_options.mode"),
        ({"top_logprobs": 2}, "invalid_value", "top_logprobs"),
    ],
)
def test_every_validation_error_has_openais_code(extra: dict[str, Any], code: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        parse_chat_request(json.dumps({**CHAT, **extra}).encode())
    assert (refused.value.code, refused.value.param) == (code, param), refused.value.message


def test_the_docs_table_lists_every_field() -> None:
    table = fields.table()
    for schema, entries in fields.INVENTORY.items():
        assert f"### `{schema}`" in table
        for name in entries:
            assert f"| `{name}` |" in table


def test_docs_api_md_shows_the_inventory_as_it_is() -> None:
    docs = Path(__file__).parents[3] / "docs" / "api.md"
    assert fields.table().rstrip() in docs.read_text(), "run: python -m gateway.wire.fields"


@pytest.mark.parametrize(
    ("task", "inventory", "known"),
    [
        ("transcribe", fields.TRANSCRIPTIONS, audio._FIELDS),
        ("translate", fields.TRANSLATIONS, audio._TRANSLATION_FIELDS),
    ],
)
def test_the_audio_forms_take_every_honoured_field_and_refuse_the_others_as_listed(
    task: str, inventory: Any, known: frozenset[str]
) -> None:
    honoured = {n for n, e in inventory.items() if isinstance(e, fields.Honoured)}
    assert honoured == {*known, "file"}
    for name, entry in inventory.items():
        if isinstance(entry, fields.Refused):
            with pytest.raises(InvalidRequest) as refused:
                audio.parse_speech_request(form(("model", "whisper-1"), (name, "x")), CT, task, 1000)  # type: ignore[arg-type]
            assert (refused.value.code, refused.value.param, refused.value.message) == (
                entry.code,
                name,
                entry.message,
            )
