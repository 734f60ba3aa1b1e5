"""A tier's events as Anthropic's server-sent events.

    message_start          the message, empty: no content, no stop_reason, the prompt's estimated tokens
    ping
    for the text:          content_block_start (text ""), content_block_delta (text_delta) …,
                           content_block_stop
    for each tool call:    content_block_start (tool_use, its id and name, input {}),
                           content_block_delta (input_json_delta: the arguments' JSON text, in pieces) …,
                           content_block_stop
    message_delta          stop_reason, stop_sequence; usage: output_tokens and the counted input_tokens;
                           tiergate.degraded when the answer was made without a medium (as on chat)
    message_stop

Blocks are numbered in order (``index``).  An error after the stream began ends it with an ``error``
event in Anthropic's shape (the status is sent already), as Anthropic's own API does.
"""

from __future__ import annotations

from typing import Any

import msgspec

from gateway.api.messages.translate import stop_of
from gateway.errors import GatewayError, anthropic_error_body
from gateway.wire import messages as am
from tiers import Finished, TextDelta, ToolCallDelta
from tiers.cloud.provider.anthropic import text_block, tool_use_block

_encoder = msgspec.json.Encoder()


def sse(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode({"type": kind, **payload}) + b"\n\n"


class MessageEvents:
    """The events of one streamed message, its content blocks numbered as they open."""

    def __init__(
        self,
        message_id: str,
        model: str,
        prompt_estimate: int,
        degraded: tuple[str, ...] = (),
        diagnosed: bool = False,
    ) -> None:
        self._id = message_id
        self._diagnosed = diagnosed  # the request asked for diagnostics: said on message_start
        self._degraded = degraded  # the media it was made without: said on message_delta, as on chat
        self._model = model
        self._estimate = prompt_estimate
        self._blocks = 0  # blocks opened so far
        self._open: str = ""  # the open block's type: "text", "tool_use" or ""

    def opening(self) -> bytes:
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self._estimate, "output_tokens": 0},
        }
        if self._diagnosed:
            message["diagnostics"] = {"cache_miss_reason": {"type": "unavailable"}}
        return sse("message_start", {"message": message}) + sse("ping", {})

    def piece(self, event: object) -> bytes:
        """The events of one tier event between the opening and :class:`~tiers.Finished` (b"" for none)."""
        if isinstance(event, TextDelta) and event.text and event.choice == 0:
            out = b"" if self._open == "text" else self._start(text_block(""), "text")
            return out + self._delta({"type": "text_delta", "text": event.text})
        if isinstance(event, ToolCallDelta) and event.choice == 0:
            out = b""
            if event.id or self._open != "tool_use":
                out += self._start(tool_use_block(event.id, event.name, {}), "tool_use")
            if event.arguments:
                out += self._delta({"type": "input_json_delta", "partial_json": event.arguments})
            return out
        return b""

    def _start(self, block: dict[str, Any], kind: str) -> bytes:
        out = self._stop()
        self._open = kind
        self._blocks += 1
        return out + sse("content_block_start", {"index": self._blocks - 1, "content_block": block})

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return sse("content_block_delta", {"index": self._blocks - 1, "delta": delta})

    def _stop(self) -> bytes:
        if not self._open:
            return b""
        self._open = ""
        return sse("content_block_stop", {"index": self._blocks - 1})

    def finish(self, finished: Finished) -> bytes:
        """The open block's end (an empty answer is one empty text block), then the stop reason and the
        counted tokens, then ``message_stop``."""
        out = b"" if self._blocks else self._start(text_block(""), "text")
        out += self._stop()
        reason, sequence = stop_of(finished.reason, finished.stop)
        usage = msgspec.to_builtins(am.UsageOut.of(finished.usage))
        ending: dict[str, Any] = {"delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage}
        if self._degraded:
            ending["tiergate"] = {"degraded": list(self._degraded)}
        return out + sse("message_delta", ending) + sse("message_stop", {})

    def failed(self, error: GatewayError) -> bytes:
        body = anthropic_error_body(error)
        return sse("error", {"error": body["error"]})
