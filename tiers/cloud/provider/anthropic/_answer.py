"""Anthropic's answer (a ``message``, or its stream of events) as a tier's events.

text block, text_delta             TextDelta
tool_use block, input_json_delta   ToolCallDelta: its id and name first, then the input's JSON text
thinking blocks                    left out (no client API here shows them)
stop_reason, stop_sequence         Finished.reason (the table in _tables.py), Finished.stop
usage                              prompt_tokens = input_tokens + cache_read_input_tokens +
                                   cache_creation_input_tokens (Anthropic counts them apart, OpenAI
                                   counts them in), cached_tokens = cache_read_input_tokens,
                                   cache_write_tokens = cache_creation_input_tokens
an ``error`` event                 :class:`StreamError` (after the first byte: it ends the answer)
"""

from __future__ import annotations

import json
from typing import Any

from tiers._events import Event, Finished, TextDelta, ToolCallDelta
from tiers._types import Usage
from tiers.cloud.provider.anthropic._tables import finish_reason


class StreamError(Exception):
    """An ``error`` event in the stream: Anthropic's error type (overloaded_error, api_error, ...)
    and message."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def usage_of(usage: dict[str, Any]) -> Usage:
    read = usage.get("cache_read_input_tokens") or 0
    written = usage.get("cache_creation_input_tokens") or 0
    return Usage(
        prompt_tokens=(usage.get("input_tokens") or 0) + read + written,
        completion_tokens=usage.get("output_tokens") or 0,
        cached_tokens=read,
        cache_write_tokens=written,
    )


def events_of_message(message: dict[str, Any]) -> list[Event]:
    """The events of a whole ``message`` (no :class:`~tiers.Started`: the tier says who served)."""
    out: list[Event] = []
    calls = 0
    for block in message.get("content") or ():
        if block["type"] == "text" and block["text"]:
            out.append(TextDelta(block["text"]))
        elif block["type"] == "tool_use":
            arguments = json.dumps(block.get("input") or {}, separators=(",", ":"))
            out.append(ToolCallDelta(calls, block["id"], block["name"], arguments))
            calls += 1
    stop = message.get("stop_sequence") or ""
    out.append(Finished(finish_reason(message.get("stop_reason")), usage_of(message["usage"]), stop))
    return out


class StreamReader:
    """Anthropic's stream events, one at a time, as a tier's events."""

    def __init__(self) -> None:
        self.model = ""
        self._usage: dict[str, Any] = {}
        self._blocks: dict[int, int] = {}  # a tool_use block's index → its call's index
        self._reason: str | None = None
        self._stop = ""

    @property
    def reason(self) -> str:
        return finish_reason(self._reason)

    @property
    def usage(self) -> Usage:
        """The usage reported so far (message_start's, then message_delta's)."""
        return usage_of(self._usage)

    def read(self, data: dict[str, Any]) -> list[Event]:
        """The events of one stream event (its JSON ``data``); raises :class:`StreamError` for an
        ``error`` one."""
        kind = data.get("type")
        if kind == "content_block_delta":
            delta = data["delta"]
            if delta["type"] == "text_delta":
                return [TextDelta(delta["text"])] if delta["text"] else []
            if delta["type"] == "input_json_delta" and data["index"] in self._blocks:
                call = self._blocks[data["index"]]
                return [ToolCallDelta(call, arguments=delta["partial_json"])] if delta["partial_json"] else []
            return []  # thinking and signature deltas
        if kind == "content_block_start":
            block = data["content_block"]
            if block["type"] == "text":
                return [TextDelta(block["text"])] if block.get("text") else []
            if block["type"] == "tool_use":
                call = self._blocks[data["index"]] = len(self._blocks)
                given = block.get("input") or {}
                arguments = json.dumps(given, separators=(",", ":")) if given else ""
                return [ToolCallDelta(call, block["id"], block["name"], arguments)]
            return []
        if kind == "message_start":
            message = data["message"]
            self.model = message.get("model", "")
            self._usage.update(message.get("usage") or {})
        elif kind == "message_delta":
            self._reason = data["delta"].get("stop_reason") or self._reason
            self._stop = data["delta"].get("stop_sequence") or self._stop
            self._usage.update({k: v for k, v in (data.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            return [Finished(finish_reason(self._reason), usage_of(self._usage), self._stop)]
        elif kind == "error":
            error = data.get("error") or {}
            raise StreamError(str(error.get("type", "error")), str(error.get("message", "")))
        return []  # ping, content_block_stop, and event types added later
