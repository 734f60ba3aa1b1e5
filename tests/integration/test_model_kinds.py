"""A model that exists, named at an endpoint that does not serve its kind (gateway/pipeline/tierset.py):
OpenAI's own error for that, not "does not exist", through the official clients.

OpenAI: a non-chat model on /v1/chat/completions is 404 invalid_request_error, param "model", code null,
"This is not a chat model and thus not supported in the v1/chat/completions endpoint. Did you mean to use
v1/completions?"; a model that does not embed on /v1/embeddings is 403 "You are not allowed to generate
embeddings from this model" (param and code null)."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.conftest import EDGE, Gateway

NOT_CHAT = (
    "This is not a chat model and thus not supported in the v1/chat/completions endpoint. "
    "Did you mean to use v1/completions?"
)


def served(gateway: Gateway, path: str) -> str:
    """A model ``/v1/models`` lists as served at ``path`` (skipped where none is built)."""
    cards = httpx.get(f"{gateway.url}/v1/models", headers=gateway.auth, timeout=10).json()["data"]
    found = next((c["id"] for c in cards if path in c.get("endpoints", [])), None)
    if found is None:
        pytest.skip(f"no model served at {path} here (scripts/setup.sh builds it)")
    return str(found)


@pytest.fixture(params=["/v1/embeddings", "/v1/audio/transcriptions"], ids=["embedding", "speech"])
def other(request: pytest.FixtureRequest, gateway: Gateway) -> str:
    return served(gateway, request.param)


def test_chat_with_a_model_that_is_not_a_chat_model_is_openais_404(gateway: Gateway, other: str) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.client().chat.completions.create(model=other, messages=[{"role": "user", "content": "Hi"}])
    assert caught.value.body == {
        "message": NOT_CHAT,
        "type": "invalid_request_error",
        "param": "model",
        "code": None,
    }


def test_the_other_text_endpoints_say_the_same_naming_themselves(gateway: Gateway, other: str) -> None:
    client = gateway.client()
    with pytest.raises(openai.NotFoundError) as responses:
        client.responses.create(model=other, input="Hi")
    with pytest.raises(openai.NotFoundError) as completions:
        client.completions.create(model=other, prompt="Hi", max_tokens=4)
    for caught, path in ((responses, "v1/responses"), (completions, "v1/completions")):
        body: Any = caught.value.body
        assert body["message"].startswith(
            f"This is not a chat model and thus not supported in the {path} endpoint."
        )
        assert (body["type"], body["param"], body["code"]) == ("invalid_request_error", "model", None)
    messages = gateway.anthropic()
    for call in (
        lambda: messages.messages.create(
            model=other, max_tokens=4, messages=[{"role": "user", "content": "Hi"}]
        ),
        lambda: messages.messages.count_tokens(model=other, messages=[{"role": "user", "content": "Hi"}]),
    ):
        with pytest.raises(anthropic.NotFoundError) as caught:
            call()
        error: Any = caught.value.body
        assert error["error"]["type"] == "not_found_error"
        assert error["error"]["message"].startswith(
            "This is not a chat model and thus not supported in the v1/messages"
        )


def test_embeddings_with_a_chat_model_is_openais_403(gateway: Gateway) -> None:
    served(gateway, "/v1/embeddings")
    with pytest.raises(openai.PermissionDeniedError) as caught:
        gateway.client().embeddings.create(model=EDGE, input="Hi")
    assert caught.value.body == {
        "message": "You are not allowed to generate embeddings from this model",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


def test_a_transcription_with_a_chat_model_says_what_it_is(gateway: Gateway) -> None:
    served(gateway, "/v1/audio/transcriptions")
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.client().audio.transcriptions.create(model=EDGE, file=("a.wav", b"RIFF0000WAVE", "audio/wav"))
    body: Any = caught.value.body
    assert body["message"] == (
        "This is a chat model and not supported in the v1/audio/transcriptions endpoint. "
        "Did you mean to use v1/chat/completions?"
    )


def test_an_unknown_model_is_still_model_not_found(gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        gateway.client().chat.completions.create(model="gpt-9", messages=[{"role": "user", "content": "Hi"}])
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError) as embedding:
        gateway.client().embeddings.create(model="gpt-9", input="Hi")
    assert embedding.value.code == "model_not_found"
