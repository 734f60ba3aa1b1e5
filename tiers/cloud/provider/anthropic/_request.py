"""A :class:`~tiers.Generation` (OpenAI-style messages and fields) as the body of Anthropic's
``POST /v1/messages`` (the ``anthropic`` SDK's ``MessageCreateParams``).

    system and developer messages    ``system``: one text block each, in order (Anthropic takes the
                                     system prompt apart from the turns)
    user text and image parts        text blocks; image blocks (data: URI → base64 source, a URL →
                                     url source)
    assistant content, tool_calls    a text block, then a tool_use block per call (arguments parsed
                                     into ``input``)
    tool messages                    tool_result blocks of a user turn; consecutive ones, and the user
                                     turn after them, make one turn (Anthropic wants the turns to
                                     alternate, a call's results in the turn right after it)
    tools, tool_choice,              tools (parameters → input_schema), tool_choice and
    parallel_tool_calls              disable_parallel_tool_use (the table in _tables.py)
    stop, temperature, top_p, top_k  stop_sequences, temperature (at most 1: Anthropic's range),
                                     top_p, top_k (a positive one)
    max_tokens                       max_tokens, required by Anthropic: the tier's default when the
                                     client set none
    response_format json_schema      output_config.format (Anthropic's structured outputs)
    reasoning_effort                 output_config.effort (minimal → low; none: left out)
    cache_control on parts, tools    passed on as sent (Anthropic's prompt caching); with
                                     ``cache_prefix`` a breakpoint on the system prompt and the tools
                                     when the client marked none

Anthropic has no seed, penalties or vLLM's sampling extras: they are not sent (the dialect refuses a
request that sets one to more than its neutral value; seed is best effort in OpenAI's own contract).
What Anthropic cannot do at all (logprobs, n > 1, logit_bias, json_object) is an ability the tier
lacks, so no such request reaches this code.
"""

from __future__ import annotations

import json
from typing import Any

from tiers._types import Generation
from tiers.cloud.provider.anthropic._tables import anthropic_tool_choice, image_source, text_block

EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}
EPHEMERAL = {"type": "ephemeral"}


def _marked(block: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """``block`` with the cache_control its source part (or message) carried."""
    if "cache_control" in source:
        block["cache_control"] = source["cache_control"]
    return block


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A user or system message's content as text and image blocks."""
    content = message.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [_marked(text_block(content), message)] if content else []
    blocks = []
    for part in content:
        if part["type"] == "text":
            if part["text"]:
                blocks.append(_marked(text_block(part["text"]), part))
        elif part["type"] == "image_url":
            blocks.append(_marked({"type": "image", "source": image_source(part["image_url"]["url"])}, part))
        else:  # audio and video: the tier takes neither, so the router sends none here
            raise ValueError(f"a {part['type']} part has no Anthropic block")
    if blocks and "cache_control" in message and "cache_control" not in blocks[-1]:
        blocks[-1]["cache_control"] = message["cache_control"]
    return blocks


def _assistant(message: dict[str, Any]) -> list[dict[str, Any]]:
    text = _text(message.get("content"))
    blocks = [text_block(text)] if text else []
    for call in message.get("tool_calls") or ():
        try:
            arguments = json.loads(call["function"]["arguments"] or "{}")
        except ValueError:
            arguments = {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": arguments if isinstance(arguments, dict) else {},
            }
        )
    if blocks and "cache_control" in message:
        blocks[-1]["cache_control"] = message["cache_control"]
    return blocks


def _text(content: str | list[dict[str, Any]] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p["text"] for p in content if p["type"] == "text")


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    return _marked(
        {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": _text(message.get("content")),
        },
        message,
    )


def turns(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The system blocks and the alternating turns of OpenAI-style ``messages``."""
    system: list[dict[str, Any]] = []
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        if role in ("system", "developer"):
            system.extend(_blocks(message))  # text parts only (OpenAI has no other in a system turn)
            continue
        if role == "tool":
            role, blocks = "user", [_tool_result(message)]
        elif role == "assistant":
            blocks = _assistant(message)
        else:
            blocks = _blocks(message)
        if not blocks:
            continue  # Anthropic refuses an empty turn
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return system, out


def _tools(given: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = []
    for tool in given:
        function = tool["function"]
        out: dict[str, Any] = {
            "name": function["name"],
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if function.get("description"):
            out["description"] = function["description"]
        if function.get("strict") is not None:
            out["strict"] = function["strict"]
        tools.append(_marked(out, tool))
    return tools


def _output_config(generation: Generation) -> dict[str, Any]:
    config: dict[str, Any] = {}
    fmt = generation.response_format
    if fmt is not None and fmt.get("type") == "json_schema":
        config["format"] = {"type": "json_schema", "schema": fmt["json_schema"].get("schema") or {}}
    effort = EFFORTS.get(generation.reasoning_effort or "")
    if effort:
        config["effort"] = effort
    return config


def _cached(blocks: list[dict[str, Any]]) -> bool:
    return any("cache_control" in b for b in blocks)


def _marked_messages(generation: Generation) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages and tools with the client's cache_control marks put back on them (a mark whose
    place is gone, a part the gateway dropped, is left out)."""
    messages, tools = list(generation.messages), list(generation.tools)
    for mark in generation.cache_marks:
        index, control = mark.get("index", -1), mark["cache_control"]
        if mark["at"] == "tool" and 0 <= index < len(tools):
            tools[index] = {**tools[index], "cache_control": control}
        elif mark["at"] == "message" and 0 <= index < len(messages):
            message = messages[index] = dict(messages[index])
            content, part = message.get("content"), mark.get("part", -1)
            if isinstance(content, list) and 0 <= part < len(content):
                message["content"] = [
                    *content[:part],
                    {**content[part], "cache_control": control},
                    *content[part + 1 :],
                ]
            else:
                message["cache_control"] = control
    return messages, tools


def params_of(
    generation: Generation, model: str, *, default_max_tokens: int, cache_prefix: bool = False
) -> dict[str, Any]:
    """The Messages API body for ``generation`` on ``model`` (``stream`` as the generation says)."""
    marked, marked_tools = _marked_messages(generation)
    system, messages = turns(marked)
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "max_tokens": generation.max_tokens or default_max_tokens,
    }
    tools = _tools(marked_tools)
    requested = next((m["cache_control"] for m in generation.cache_marks if m["at"] == "request"), None)
    if requested is not None:
        body["cache_control"] = requested
    elif cache_prefix and not (
        _cached(system) or _cached(tools) or any(_cached(m["content"]) for m in messages)
    ):
        # The stable prefix (tools come first in Anthropic's prompt, then the system prompt): one
        # breakpoint at its end caches both.
        if system:
            system[-1]["cache_control"] = dict(EPHEMERAL)
        elif tools:
            tools[-1]["cache_control"] = dict(EPHEMERAL)
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
        body["tool_choice"] = anthropic_tool_choice(generation.tool_choice, generation.parallel_tool_calls)
    if generation.stop:
        body["stop_sequences"] = list(generation.stop)
    if generation.temperature is not None:
        body["temperature"] = min(generation.temperature, 1.0)
    if generation.top_p is not None:
        body["top_p"] = generation.top_p
    if generation.top_k is not None and generation.top_k > 0:
        body["top_k"] = generation.top_k
    if config := _output_config(generation):
        body["output_config"] = config
    if generation.stream:
        body["stream"] = True
    return body
