"""Frame a tier's events as OpenAI's server-sent events, ending in ``data: [DONE]``.

Each choice opens with a chunk naming the role; text, tool-call pieces (a call's id and name first,
then its argument text) and logprobs follow as the tier makes them, each in the chunk of its choice;
a choice's finish_reason comes in a chunk of its own; the usage chunk (asked for with
``stream_options.include_usage``) has no choices.  Logprobs ride with the text they score.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import msgspec

from gateway.errors import error_body, to_gateway_error
from gateway.wire.chat import encode
from gateway.wire.chat_response import (
    ChatCompletionChunk,
    ChoiceLogprobs,
    ChunkChoice,
    DeltaBody,
    FunctionDelta,
    TiergateInfo,
    ToolCallChunk,
    logprobs_body,
    obfuscation,
    usage_body,
)
from tiers import ChoiceDone, Event, Finished, Logprobs, TextDelta, TokenLogprob, ToolCallDelta, Usage

DONE = b"data: [DONE]\n\n"


def frame(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


class ChunkWriter:
    """Builds the chunks of one response; all share its id, model and creation time."""

    def __init__(
        self,
        completion_id: str,
        created: int,
        model: str,
        *,
        include_usage: bool,
        info: TiergateInfo | msgspec.UnsetType = msgspec.UNSET,
        fingerprint: str | None = None,
        choices: int = 1,
        obfuscate: bool = False,
    ) -> None:
        self._id = completion_id
        self._obfuscate = obfuscate  # stream_options.include_obfuscation
        self._created = created
        self._model = model
        self._include_usage = include_usage
        self._info = info  # tiergate's own field, sent on the finishing chunk
        self._fingerprint = fingerprint
        self._choices = choices
        self._open = set(range(choices))  # choices not yet finished
        self._scores: dict[int, list[TokenLogprob]] = {}  # logprobs waiting for their text

    def _chunk(
        self,
        delta: DeltaBody,
        choice: int = 0,
        finish_reason: str | None = None,
        info: TiergateInfo | msgspec.UnsetType = msgspec.UNSET,
        logprobs: ChoiceLogprobs | None = None,
    ) -> bytes:
        body = ChunkChoice(choice, delta, finish_reason, logprobs)
        chunk = ChatCompletionChunk(
            self._id, self._created, self._model, [body], system_fingerprint=self._fingerprint, tiergate=info
        )
        if self._obfuscate:
            chunk.obfuscation = obfuscation()
        return frame(encode(chunk))

    def role(self) -> bytes:
        return b"".join(self._chunk(DeltaBody(role="assistant", content=""), i) for i in range(self._choices))

    def text(self, text: str, choice: int = 0) -> bytes:
        return self._chunk(
            DeltaBody(content=text), choice, logprobs=logprobs_body(self._scores.pop(choice, None))
        )

    def tool(self, delta: ToolCallDelta) -> bytes:
        if delta.id:
            call = ToolCallChunk(
                delta.index, delta.id, "function", FunctionDelta(delta.name, delta.arguments)
            )
        else:
            call = ToolCallChunk(delta.index, function=FunctionDelta(arguments=delta.arguments))
        return self._chunk(DeltaBody(tool_calls=[call]), delta.choice)

    def _end(self, choice: int, reason: str) -> bytes:
        """The choice's last chunk (after any logprobs still waiting for text)."""
        self._open.discard(choice)
        out = b""
        if scores := self._scores.pop(choice, None):
            out = self._chunk(DeltaBody(), choice, logprobs=logprobs_body(scores))
        last = not self._open
        return out + self._chunk(DeltaBody(), choice, reason, self._info if last else msgspec.UNSET)

    def finish(self, reason: str, usage: Usage | None) -> bytes:
        out = b"".join(self._end(i, reason) for i in sorted(self._open))
        if self._include_usage and usage is not None:
            out += frame(
                encode(
                    ChatCompletionChunk(
                        self._id,
                        self._created,
                        self._model,
                        [],
                        system_fingerprint=self._fingerprint,
                        usage=usage_body(usage),
                    )
                )
            )
        return out + DONE

    def piece(self, event: Event) -> bytes:
        """The chunk(s) of one event between the opening and :class:`Finished` (b"" for none)."""
        if isinstance(event, TextDelta):
            return self.text(event.text, event.choice) if event.text else b""
        if isinstance(event, ToolCallDelta):
            return self.tool(event)
        if isinstance(event, Logprobs):
            self._scores.setdefault(event.choice, []).extend(event.tokens)
            return b""
        if isinstance(event, ChoiceDone):
            return self._end(event.choice, event.reason)
        return b""

    async def events(self, first: Event, rest: AsyncIterator[Event]) -> AsyncGenerator[bytes, None]:
        """The whole stream: role, pieces, finish (+ usage), [DONE].

        ``first`` is the answer's first event after :class:`~tiers.Started`, ``rest`` what follows.
        An error after the first byte cannot change the status any more; it is
        sent as an OpenAI-shaped error event and the stream ends.
        """
        # The role and the first piece go out in one write: both are here already.
        opening = self.role()
        event = first
        try:
            if not isinstance(event, Finished):
                opening += self.piece(event)
                yield opening
                opening = b""
                event = await anext(rest)
                while not isinstance(event, Finished):
                    if out := self.piece(event):
                        yield out
                    event = await anext(rest)
        except StopAsyncIteration:
            yield opening + self.finish("stop", None)
            return
        except Exception as exc:  # the tier failed mid-stream
            yield frame(msgspec.json.encode(error_body(to_gateway_error(exc))))
            return
        yield opening + self.finish(event.reason, event.usage)
