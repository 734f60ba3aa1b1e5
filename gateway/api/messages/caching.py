"""Where a Messages request marked prompt-cache breakpoints (``cache_control``), in the terms of the
chat messages it became (gateway/api/messages/translate.py), so that a provider tier speaking Anthropic's
protocol can put each back on the block it was on (``Generation.cache_marks``; read by
tiers/cloud/provider/anthropic/_request.py).  Other tiers' engines cache prefixes without marks.

    a system block                      the system message (index 0), as a whole
    a text or image block of a user     that part of the user message it became
    a tool_result block                 the tool message it became, as a whole
    a block of an assistant or system   that message, as a whole
    turn
    a tool                              that tool
    the request's own cache_control     the request (Anthropic's automatic placement)

This walk mirrors :func:`~gateway.api.messages.translate.messages_of`: the same messages, counted
the same way.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.wire import messages as am


def _mark(cache_control: am.CacheControl, **where: Any) -> dict[str, Any]:
    return {**where, "cache_control": msgspec.to_builtins(cache_control)}


def _user(message: am.MessageParam, at: int) -> tuple[list[dict[str, Any]], int]:
    """The marks of a user turn starting at chat message ``at``, and how many messages it became."""
    if isinstance(message.content, str):
        return [], 1
    results = sum(isinstance(b, am.ToolResultBlock) for b in message.content)
    marks: list[dict[str, Any]] = []
    result = parts = 0
    for block in message.content:
        if isinstance(block, am.ToolResultBlock):
            if block.cache_control is not None:
                marks.append(_mark(block.cache_control, at="message", index=at + result, part=-1))
            result += 1
            if not isinstance(block.content, str):  # its images follow in the user message
                parts += sum(isinstance(b, am.ImageBlock) for b in block.content)
        elif isinstance(block, am.TextBlock | am.ImageBlock):
            if block.cache_control is not None:
                marks.append(_mark(block.cache_control, at="message", index=at + results, part=parts))
            parts += 1
    return marks, results + (1 if parts else 0)


def cache_marks(request: am.CreateMessage) -> list[dict[str, Any]]:
    marks: list[dict[str, Any]] = []
    at = 0
    system = request.system
    if system is not None and (system if isinstance(system, str) else "\n".join(b.text for b in system)):
        marked = (
            [b.cache_control for b in system if b.cache_control is not None]
            if isinstance(system, list)
            else []
        )
        if marked:
            marks.append(_mark(marked[-1], at="message", index=0, part=-1))
        at = 1
    for message in request.messages:
        if message.role == "user":
            found, count = _user(message, at)
            marks.extend(found)
            at += count
            continue
        if isinstance(message.content, list):
            marked = [
                b.cache_control
                for b in message.content
                if isinstance(b, am.TextBlock | am.ToolUseBlock) and b.cache_control is not None
            ]
            if marked:
                marks.append(_mark(marked[-1], at="message", index=at, part=-1))
        at += 1
    for i, tool in enumerate(request.tools or ()):
        if tool.cache_control is not None:
            marks.append(_mark(tool.cache_control, at="tool", index=i))
    if request.cache_control is not None:
        marks.append(_mark(request.cache_control, at="request"))
    return marks
