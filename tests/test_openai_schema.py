"""The OpenAI schema validator (tests/openai_schema.py): OpenAI's own examples pass, and the mistakes a
gateway could make are caught with the path that shows where."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.openai_schema import (
    CHAT_COMPLETION,
    CHAT_COMPLETION_CHUNK,
    DOCUMENT,
    ERROR,
    MODEL,
    MODELS,
    to_json_schema,
    validate,
    validator,
)


def completion(**message: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "edge-smollm2-135m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi.", "refusal": None, **message},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14},
    }


def chunk(**choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "edge-smollm2-135m",
        "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None, **choice}
        ],
    }


def test_a_minimal_chat_completion_and_chunk_pass() -> None:
    validate(CHAT_COMPLETION, completion())
    validate(CHAT_COMPLETION_CHUNK, chunk())
    validate(CHAT_COMPLETION_CHUNK, chunk(delta={"content": "Hi"}, logprobs=None))
    validate(CHAT_COMPLETION_CHUNK, chunk(delta={}, finish_reason="length"))


def test_the_usage_chunk_passes_and_usage_may_be_null_on_the_others() -> None:
    last = {
        **chunk(),
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    validate(CHAT_COMPLETION_CHUNK, last)
    validate(CHAT_COMPLETION_CHUNK, {**chunk(), "usage": None})  # `nullable: true` beside a $ref


def test_a_chunk_without_choices_fails_naming_it() -> None:
    body = chunk()
    del body["choices"]
    with pytest.raises(AssertionError, match=r"'choices' is a required property"):
        validate(CHAT_COMPLETION_CHUNK, body)


def test_a_chunk_with_the_wrong_object_fails_at_that_path() -> None:
    with pytest.raises(AssertionError, match=r"object: 'chat.completion' is not one of"):
        validate(CHAT_COMPLETION_CHUNK, {**chunk(), "object": "chat.completion"})


def test_a_failure_names_the_nested_path() -> None:
    with pytest.raises(AssertionError, match=r"choices\[0\]\.finish_reason: 'done' is not one of"):
        validate(CHAT_COMPLETION_CHUNK, chunk(finish_reason="done"))
    with pytest.raises(AssertionError, match=r"choices\[0\]: 'finish_reason' is a required property"):
        validate(CHAT_COMPLETION_CHUNK, {**chunk(), "choices": [{"index": 0, "delta": {}}]})
    with pytest.raises(AssertionError, match=r"usage\.total_tokens: '4' is not of type 'integer'"):
        validate(CHAT_COMPLETION, {**completion(), "usage": {**completion()["usage"], "total_tokens": "4"}})


def test_a_message_with_tool_calls_and_null_content_passes() -> None:
    call = {"id": "call_abc", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    body = completion(content=None, tool_calls=[call])
    body["choices"][0]["finish_reason"] = "tool_calls"
    validate(CHAT_COMPLETION, body)
    broken = completion(content=None, tool_calls=[{**call, "function": {"name": "get_weather"}}])
    with pytest.raises(AssertionError, match=r"tool_calls\[0\]"):
        validate(CHAT_COMPLETION, broken)


def test_streamed_tool_call_deltas_pass() -> None:
    first = {"index": 0, "id": "call_abc", "type": "function", "function": {"name": "f", "arguments": ""}}
    validate(
        CHAT_COMPLETION_CHUNK, chunk(delta={"role": "assistant", "content": None, "tool_calls": [first]})
    )
    validate(
        CHAT_COMPLETION_CHUNK, chunk(delta={"tool_calls": [{"index": 0, "function": {"arguments": '{"a'}}]})
    )
    with pytest.raises(AssertionError, match=r"'index' is a required property"):
        validate(CHAT_COMPLETION_CHUNK, chunk(delta={"tool_calls": [{"function": {"arguments": "1"}}]}))


def test_logprobs_content_entries_pass() -> None:
    entry = {
        "token": "Hi",
        "logprob": -0.01,
        "bytes": [72, 105],
        "top_logprobs": [
            {"token": "Hi", "logprob": -0.01, "bytes": [72, 105]},
            {"token": "Hello", "logprob": -4.7, "bytes": None},
        ],
    }
    body = completion()
    body["choices"][0]["logprobs"] = {"content": [entry], "refusal": None}
    validate(CHAT_COMPLETION, body)
    validate(CHAT_COMPLETION_CHUNK, chunk(logprobs={"content": [entry], "refusal": None}))
    body["choices"][0]["logprobs"] = {
        "content": [{**entry, "top_logprobs": [{"token": "Hi"}]}],
        "refusal": None,
    }
    with pytest.raises(AssertionError, match=r"top_logprobs\[0\]: 'logprob' is a required property"):
        validate(CHAT_COMPLETION, body)


def test_models_and_errors() -> None:
    model = {"id": "tiergate-auto", "object": "model", "created": 0, "owned_by": "tiergate"}
    validate(MODEL, model)
    validate(MODELS, {"object": "list", "data": [model]})
    error = {
        "message": "no",
        "type": "invalid_request_error",
        "param": None,
        "code": "context_length_exceeded",
    }
    validate(ERROR, {"error": error})
    with pytest.raises(AssertionError, match=r"error: 'param' is a required property"):
        validate(ERROR, {"error": {k: v for k, v in error.items() if k != "param"}})


def test_pydantic_models_of_the_openai_client_are_checked_as_their_json() -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    validate(CHAT_COMPLETION, ChatCompletion.model_validate(completion()))
    validate(CHAT_COMPLETION_CHUNK, ChatCompletionChunk.model_validate(chunk()))


def _examples(component: str) -> list[Any]:
    """The JSON objects of a component's example in OpenAI's document (several for a stream)."""
    text = json.loads(DOCUMENT.read_text())["components"]["schemas"][component]["x-oaiMeta"]["example"]
    decoder, found, at = json.JSONDecoder(), [], 0
    while (at := text.find("{", at)) != -1:
        value, at = decoder.raw_decode(text, at)
        found.append(value)
    return found


@pytest.mark.parametrize(
    "component", [CHAT_COMPLETION, CHAT_COMPLETION_CHUNK, "CreateCompletionResponse", MODEL]
)
def test_openai_s_own_examples_pass(component: str) -> None:
    examples = _examples(component)
    assert examples
    for example in examples:
        validate(component, example)


def test_the_openapi_dialect_is_converted() -> None:
    assert to_json_schema({"type": "string", "enum": ["a"], "nullable": True}) == {
        "type": ["string", "null"],
        "enum": ["a", None],
    }
    assert to_json_schema({"$ref": "#/x", "nullable": True}) == {"anyOf": [{"$ref": "#/x"}, {"type": "null"}]}
    assert to_json_schema({"type": "number", "minimum": 0, "exclusiveMinimum": True}) == {
        "type": "number",
        "exclusiveMinimum": 0,
    }
    # a property *named* like a keyword is a property, not a keyword
    converted = to_json_schema({"type": "object", "properties": {"nullable": {"type": "boolean"}}})
    assert converted == {"type": "object", "properties": {"nullable": {"type": "boolean"}}}


def test_validators_are_compiled_once_and_unknown_names_refused() -> None:
    assert validator(CHAT_COMPLETION) is validator(CHAT_COMPLETION)
    with pytest.raises(KeyError, match="ChatCompletionResponse"):
        validator("ChatCompletionResponse")
