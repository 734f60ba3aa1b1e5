"""What Anthropic's Messages API and the neutral (OpenAI-style) shapes tiers speak call each other:
the one table both directions read, for the provider tier's dialect and for the gateway's
``/v1/messages`` endpoint alike.

    finish_reason (neutral)     stop_reason (Anthropic)
    stop                        end_turn, or stop_sequence when one of the request's ended it
    length                      max_tokens (and model_context_window_exceeded, read back)
    tool_calls                  tool_use
    content_filter              refusal
    stop (read back)            pause_turn

    tool_choice (neutral)       tool_choice (Anthropic)
    auto                        {"type": "auto"}
    required                    {"type": "any"}
    {"function": {"name": n}}   {"type": "tool", "name": n}
    none                        {"type": "none"}
    parallel_tool_calls false   disable_parallel_tool_use true (not on none)

    image_url data: URI         image block, base64 source (its media type and data)
    image_url http(s) URL       image block, url source
    tool call call_…            tool_use block toolu_… (a client's own ids pass as sent)
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger(__name__)

STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}

FINISH_REASONS: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

TOOL_CHOICES: dict[str, str] = {"auto": "auto", "required": "any", "none": "none"}
NEUTRAL_TOOL_CHOICES: dict[str, str] = {v: k for k, v in TOOL_CHOICES.items()}

IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def stop_reason(finish_reason: str, stop: str = "") -> tuple[str, str | None]:
    """Anthropic's stop_reason and stop_sequence for a neutral finish_reason and the stop sequence that
    ended the answer (empty when none did)."""
    if finish_reason == "stop" and stop:
        return "stop_sequence", stop
    return STOP_REASONS.get(finish_reason, "end_turn"), None


def finish_reason(reason: str | None) -> str:
    """The neutral finish_reason of Anthropic's stop_reason (an unknown or missing one: stop)."""
    return FINISH_REASONS.get(reason or "", "stop")


def anthropic_tool_choice(choice: str | dict[str, Any] | None, parallel: bool | None) -> dict[str, Any]:
    """Anthropic's tool_choice for a neutral one (None: auto) and parallel_tool_calls."""
    if isinstance(choice, dict):
        out: dict[str, Any] = {"type": "tool", "name": choice["function"]["name"]}
    else:
        out = {"type": TOOL_CHOICES[choice or "auto"]}
    if parallel is False and out["type"] != "none":
        out["disable_parallel_tool_use"] = True
    return out


def neutral_tool_choice(choice: dict[str, Any]) -> tuple[str | dict[str, Any], bool | None]:
    """The neutral tool_choice and parallel_tool_calls of Anthropic's tool_choice (a plain dict)."""
    kind = choice["type"]
    neutral: str | dict[str, Any] = (
        {"type": "function", "function": {"name": choice["name"]}}
        if kind == "tool"
        else NEUTRAL_TOOL_CHOICES[kind]
    )
    return neutral, (False if choice.get("disable_parallel_tool_use") else None)


def tool_use_id(call_id: str) -> str:
    """A tier's call id (``call_…``) as Anthropic's (``toolu_…``); a client's own ids pass as sent."""
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.removeprefix("call_")


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as ``input``; what is no JSON object (a model's slip) is an empty one."""
    try:
        found = json.loads(arguments or "{}")
    except ValueError:
        found = None
    if not isinstance(found, dict):
        log.warning("anthropic: a tool call's arguments are no JSON object: %.200r", arguments)
        return {}
    return found


def image_source(url: str) -> dict[str, Any]:
    """An image part's URL as an image block's source: a ``data:`` URI's bytes as base64, else the URL."""
    if url.startswith("data:"):
        head, _, data = url.partition(",")
        media_type = head[5:].split(";")[0]
        return {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "url", "url": url}


def image_url(source: dict[str, Any]) -> str:
    """An image block's source as an image part's URL (base64: a ``data:`` URI)."""
    if source["type"] == "base64":
        return f"data:{source['media_type']};base64,{source['data']}"
    return str(source["url"])


def text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def tool_use_block(call_id: str, name: str, input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_use_id(call_id), "name": name, "input": input}
