"""Anthropic's cache_control breakpoints on /v1/messages reach an Anthropic provider tier on the blocks
they were on: marked on the way in (gateway/api/messages/caching.py), put back by the shared
translator (tiers/cloud/provider/anthropic/_request.py)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from gateway.api.messages.caching import cache_marks
from gateway.api.messages.translate import chat_request
from gateway.wire import messages as am
from tests.standins.anthropic_provider import check_body
from tiers import Generation
from tiers.cloud.provider.anthropic import params_of

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}


def _through(request: dict[str, Any]) -> dict[str, Any]:
    """``request`` as the gateway takes it and an Anthropic provider tier sends it on."""
    parsed = am.parse_create(json.dumps(request).encode())
    chat = chat_request(parsed)
    gen = Generation(
        messages=msgspec.to_builtins(chat.messages),
        tools=[msgspec.to_builtins(t) for t in chat.tools or ()],
        cache_marks=cache_marks(parsed),
    )
    body = params_of(gen, "claude", default_max_tokens=10)
    assert check_body(body) == "", check_body(body)
    return body


def test_each_mark_lands_where_the_client_put_it() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    body = _through(
        {
            "model": "claude",
            "max_tokens": 10,
            "system": [
                {"type": "text", "text": "Rules."},
                {"type": "text", "text": "More.", "cache_control": HOUR},
            ],
            "tools": [{"name": "f", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}],
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "one"}, {**image, "cache_control": EPHEMERAL}],
                },
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": "toolu_1",
                            "name": "f",
                            "input": {},
                            "cache_control": EPHEMERAL,
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "toolu_1",
                            "content": "ok",
                            "cache_control": EPHEMERAL,
                        },
                        {"type": "text", "text": "two"},
                        {"type": "text", "text": "three", "cache_control": HOUR},
                    ],
                },
            ],
        }
    )
    assert body["system"] == [
        {"type": "text", "text": "Rules.\nMore.", "cache_control": HOUR}
    ]  # one system text
    assert body["tools"][0]["cache_control"] == EPHEMERAL
    first, call, results = body["messages"]
    assert "cache_control" not in first["content"][0] and first["content"][1]["cache_control"] == EPHEMERAL
    assert call["content"][-1]["cache_control"] == EPHEMERAL
    assert results["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok", "cache_control": EPHEMERAL},
        {"type": "text", "text": "two"},
        {"type": "text", "text": "three", "cache_control": HOUR},
    ]


def test_the_requests_own_cache_control_and_none() -> None:
    plain = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    assert _through({**plain, "cache_control": EPHEMERAL})["cache_control"] == EPHEMERAL
    assert "cache_control" not in json.dumps(_through(plain))
