"""What the semantic cache compares by meaning (the last user turn's text) and what must match exactly
(the context: everything else, media hashes included); which requests it skips; the near-miss guard."""

from __future__ import annotations

import json
from typing import Any

import pytest

import cache
import router
from gateway.ops.metrics import Metrics
from gateway.pipeline.answers.exact import AnswerCache
from gateway.pipeline.answers.semantic.context import last_text, skipped, without_last_text
from gateway.pipeline.answers.semantic.guard import agree, terms
from gateway.wire.chat import ChatCompletionRequest, parse_chat_request

ON = router.SemanticCachePolicy(enabled=True)
RED = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
BLUE = RED.replace("X8jx0g", "X8jx0h")


def request(last: Any, *earlier: dict[str, Any], **params: Any) -> ChatCompletionRequest:
    body = {"model": "tiergate-auto", "messages": [*earlier, {"role": "user", "content": last}]}
    return parse_chat_request(json.dumps({**body, "temperature": 0, **params}).encode())


def image_turn(text: str, url: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]


@pytest.fixture(scope="module")
def answers() -> AnswerCache:
    return AnswerCache(cache.CacheConfig(), None, router.AutoRule(), Metrics())


def context(answers: AnswerCache, req: ChatCompletionRequest) -> str:
    return answers.key(without_last_text(req), "t", "models")


def test_the_context_ignores_the_last_turns_text_and_nothing_else(answers: AnswerCache) -> None:
    base = context(answers, request("What is the capital of France?"))
    assert context(answers, request("Which city is France's capital?")) == base
    assert context(answers, request("Which city is France's capital?", max_tokens=5)) != base
    system = {"role": "system", "content": "Answer in French."}
    assert context(answers, request("What is the capital of France?", system)) != base
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    assert context(answers, request("What is the capital of France?", tools=tools)) != base


def test_media_hashes_must_match(answers: AnswerCache) -> None:
    red = context(answers, request(image_turn("What colour is this?", RED)))
    assert context(answers, request(image_turn("Which colour is shown?", RED))) == red
    assert context(answers, request(image_turn("What colour is this?", BLUE))) != red
    assert context(answers, request("What colour is this?")) != red
    assert last_text(request(image_turn("What colour is this?", RED))) == "What colour is this?"


def test_tool_results_sampling_and_a_last_turn_not_the_users_are_skipped() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    turns = (
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    )
    assert skipped(request("Summarize.", *turns), ON) == "tool results"
    assert (
        skipped(request("Summarize.", *turns), router.SemanticCachePolicy(enabled=True, allow_tools=True))
        is None
    )
    assert skipped(request("Name a colour.", temperature=0.7), ON) == "sampled"
    assert skipped(request("Name a colour.", temperature=0.7, seed=1), ON) is None
    assert (
        skipped(
            request("Name a colour.", temperature=0.7),
            router.SemanticCachePolicy(enabled=True, allow_sampling=True),
        )
        is None
    )
    assert skipped(request("Name a colour."), router.SemanticCachePolicy()) == "off"


@pytest.mark.parametrize(
    ("stored", "asked", "same"),
    [
        ("What is the capital of France?", "Which city is the capital of France?", True),
        ("What is the capital of France?", "What is the capital of Germany?", False),
        ("What is 15 times 12?", "What is 15 times 13?", False),
        ('Translate "good morning" into Spanish.', 'Translate "good night" into Spanish.', False),
        ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?", False),
        ("Recommend a good book about history.", "Can you suggest a good history book?", True),
        ("When did World War II end?", "When did World War I end?", False),
        ("Who painted the Mona Lisa?", "Who was the painter of the Mona Lisa?", True),
    ],
)
def test_the_guard(stored: str, asked: str, same: bool) -> None:
    assert agree(terms(stored), terms(asked)) is same
