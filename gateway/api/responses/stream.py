"""A tier's events as the Responses API's server-sent events.

    response.created, response.in_progress
    for the text:  output_item.added (message), content_part.added (output_text),
                   output_text.delta …, output_text.done, content_part.done, output_item.done
    for each call: output_item.added (function_call), function_call_arguments.delta …,
                   function_call_arguments.done, output_item.done
    response.completed (or response.incomplete when max_output_tokens cut it)

An error after the stream began ends it with ``response.failed`` (the response with its error).
Every event has a ``sequence_number``; logprobs ride with the text they score.
"""

from __future__ import annotations

from typing import Any

from gateway.api.responses import objects as ro
from gateway.wire.chat_response import obfuscation
from tiers import Completion, Logprobs, TextDelta, TokenLogprob, ToolCallDelta


def sse(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + ro.encode(payload) + b"\n\n"


def _scores(tokens: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "top_logprobs": [{"token": a.token, "logprob": a.logprob} for a in t.top],
        }
        for t in tokens
    ]


class ResponseEvents:
    """The events of one streamed response, numbered in order."""

    def __init__(self, response: ro.Response, *, obfuscate: bool = False) -> None:
        self.response = response
        self._obfuscate = obfuscate  # stream_options.include_obfuscation: padding on delta events
        self._calls = 0  # function calls opened (max_tool_calls ignores the model's further ones)
        self._ignoring = False  # the model is making a call past max_tool_calls
        self._sequence = 0
        self._items: list[ro.OutputItem] = []  # output items opened so far
        self._text: list[str] = []  # the open message's text
        self._call_args: list[str] = []  # the open call's argument text
        self._scores: list[TokenLogprob] = []  # logprobs waiting for their text
        self._scored: list[TokenLogprob] = []  # the open message's logprobs

    @property
    def item_ids(self) -> tuple[str, list[str]]:
        """The message's item id (or a new one) and the calls' item ids, in order: the final
        response's output items take the ids its events named."""
        message = next((i.id for i in self._items if isinstance(i, ro.OutputMessage)), ro.new_id("msg"))
        return message, [i.id for i in self._items if isinstance(i, ro.FunctionCall)]

    def _event(self, kind: str, **fields: Any) -> bytes:
        self._sequence += 1
        return sse(kind, {"type": kind, "sequence_number": self._sequence, **fields})

    def _whole(self, kind: str) -> bytes:
        return self._event(kind, response=self.response)

    def opening(self) -> bytes:
        return self._whole("response.created") + self._whole("response.in_progress")

    def piece(self, event: object) -> bytes:
        if isinstance(event, TextDelta):
            return self._text_delta(event.text) if event.text else b""
        if isinstance(event, ToolCallDelta):
            if event.id:  # a call opens: one past max_tool_calls is ignored, with its pieces
                limit = self.response.max_tool_calls
                self._ignoring = limit is not None and self._calls >= limit
                self._calls += not self._ignoring
            return b"" if self._ignoring else self._call_delta(event)
        if isinstance(event, Logprobs):
            self._scores.extend(event.tokens)
        return b""

    def _open(self) -> ro.OutputItem | None:
        return self._items[-1] if self._items and self._items[-1].status == "in_progress" else None

    def _text_delta(self, text: str) -> bytes:
        out = b""
        item = self._open()
        if not isinstance(item, ro.OutputMessage):
            out += self._close()
            item = ro.OutputMessage(ro.new_id("msg"), "in_progress", [])
            out += self._added(item)
            out += self._part("response.content_part.added", item, ro.OutputTextPart(""))
        self._text.append(text)
        scores, self._scores = self._scores, []
        self._scored.extend(scores)
        return out + self._event(
            "response.output_text.delta",
            item_id=item.id,
            output_index=len(self._items) - 1,
            content_index=0,
            delta=text,
            logprobs=_scores(scores),
            **self._padding(),
        )

    def _call_delta(self, delta: ToolCallDelta) -> bytes:
        out = b""
        item = self._open()
        if delta.id or not isinstance(item, ro.FunctionCall):
            out += self._close()
            item = ro.FunctionCall(ro.new_id("fc"), delta.id, delta.name, "", "in_progress")
            out += self._added(item)
        if delta.arguments:
            self._call_args.append(delta.arguments)
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=item.id,
                output_index=len(self._items) - 1,
                delta=delta.arguments,
                **self._padding(),
            )
        return out

    def _padding(self) -> dict[str, str]:
        return {"obfuscation": obfuscation()} if self._obfuscate else {}

    def _added(self, item: ro.OutputItem) -> bytes:
        self._items.append(item)
        return self._event("response.output_item.added", output_index=len(self._items) - 1, item=item)

    def _part(self, kind: str, item: ro.OutputMessage, part: ro.OutputTextPart) -> bytes:
        index = len(self._items) - 1
        return self._event(kind, item_id=item.id, output_index=index, content_index=0, part=part)

    def _close(self, status: str = "completed") -> bytes:
        """Ends the open output item, if any."""
        item = self._open()
        index = len(self._items) - 1
        if isinstance(item, ro.OutputMessage):
            self._scored.extend(self._scores)
            self._scores = []
            text = "".join(self._text)
            part = ro.OutputTextPart(text, logprobs=ro.logprobs_of(self._scored))
            done = ro.OutputMessage(item.id, status, [part])
            self._items[index] = done
            out = self._event(
                "response.output_text.done",
                item_id=item.id,
                output_index=index,
                content_index=0,
                text=text,
                logprobs=_scores(self._scored),
            )
            out += self._part("response.content_part.done", done, part)
            self._text, self._scored = [], []
            return out + self._event("response.output_item.done", output_index=index, item=done)
        if isinstance(item, ro.FunctionCall):
            arguments = "".join(self._call_args)
            self._call_args = []
            call = ro.FunctionCall(item.id, item.call_id, item.name, arguments, "completed")
            self._items[index] = call
            out = self._event(
                "response.function_call_arguments.done",
                item_id=item.id,
                name=item.name,
                output_index=index,
                arguments=arguments,
            )
            return out + self._event("response.output_item.done", output_index=index, item=call)
        return b""

    def finish(self, final: ro.Response) -> bytes:  # after final(), which names the items
        """The open item's end, then ``response.completed`` (or ``incomplete``) with ``final``."""
        out = b""
        if not self._items and isinstance(final.output[0], ro.OutputMessage):
            # An empty answer is an empty message, announced as any other.
            item = ro.OutputMessage(final.output[0].id, "in_progress", [])
            out += self._added(item) + self._part("response.content_part.added", item, ro.OutputTextPart(""))
        out += self._close("incomplete" if final.status == "incomplete" else "completed")
        self.response = final
        return out + self._whole(f"response.{final.status}")

    def failed(self, code: str, message: str) -> bytes:
        self.response = ro.failed(self.response, code, message)
        self.response.output = [i for i in self._items if i.status != "in_progress"]
        return self._whole("response.failed")

    def final(self, answer: Completion) -> ro.Response:
        """The whole response, its output items named as the events named them."""
        message_id, call_ids = self.item_ids
        output = ro.output_of(answer.choices[0], message_id, call_ids, self.response.max_tool_calls)
        return ro.finished(self.response, answer, output)
