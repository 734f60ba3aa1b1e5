"""OpenAI's error for a model of another endpoint (gateway/pipeline/tierset.py), without a server."""

from __future__ import annotations

import pytest

from gateway.errors import anthropic_error_body, anthropic_status, error_body
from gateway.pipeline.tierset import Catalogue


def catalogue(speech: tuple[str, ...] = ("whisper-1", "whisper-base")) -> Catalogue:
    found = Catalogue()
    found.add("chat", lambda: ["tiergate-auto", "edge", "cloud"])
    found.add("embedding", lambda: ["all-minilm-l6-v2", "text-embedding-3-small"])
    found.add("speech", lambda: speech)
    return found


def test_a_speech_model_on_chat_is_openais_404_word_for_word() -> None:
    error = catalogue().misplaced("whisper-1", "chat")
    assert error is not None and error.status == 404
    assert error_body(error) == {
        "error": {
            "message": "This is not a chat model and thus not supported in the v1/chat/completions endpoint. "
            "Did you mean to use v1/completions?",
            "type": "invalid_request_error",
            "param": "model",
            "code": None,
        }
    }


def test_a_chat_model_on_embeddings_is_openais_403() -> None:
    error = catalogue().misplaced("edge", "embeddings")
    assert error is not None and error.status == 403
    assert error_body(error)["error"] == {
        "message": "You are not allowed to generate embeddings from this model",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


@pytest.mark.parametrize(
    ("model", "endpoint", "message"),
    [
        (
            "text-embedding-3-small",
            "responses",
            "This is not a chat model and thus not supported in the v1/responses endpoint. Did you mean to use v1/embeddings?",
        ),
        (
            "whisper-1",
            "completions",
            "This is not a chat model and thus not supported in the v1/completions endpoint. Did you mean to use v1/audio/transcriptions?",
        ),
        (
            "edge",
            "translations",
            "This is a chat model and not supported in the v1/audio/translations endpoint. Did you mean to use v1/chat/completions?",
        ),
        (
            "all-minilm-l6-v2",
            "transcriptions",
            "This is an embedding model and not supported in the v1/audio/transcriptions endpoint. Did you mean to use v1/embeddings?",
        ),
    ],
)
def test_the_other_endpoints_name_themselves_and_where_the_model_is(
    model: str, endpoint: str, message: str
) -> None:
    error = catalogue().misplaced(model, endpoint)
    assert error is not None and (error.status, error.message) == (404, message)


def test_on_the_messages_api_it_is_anthropics_not_found() -> None:
    error = catalogue().misplaced("whisper-1", "messages")
    assert error is not None and anthropic_status(error) == 404
    assert anthropic_error_body(error)["error"] == {"type": "not_found_error", "message": error.message}


def test_a_model_of_the_right_kind_an_unknown_one_and_one_not_built_are_not_misplaced() -> None:
    assert catalogue().misplaced("edge", "chat") is None
    assert catalogue().misplaced("gpt-9", "chat") is None  # the caller's model_not_found
    assert catalogue(speech=()).misplaced("whisper-1", "chat") is None  # not built: not listed either
