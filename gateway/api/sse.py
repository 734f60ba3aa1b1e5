"""Frame a tier's events as OpenAI's server-sent events, ending in ``data: [DONE]``."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

import msgspec

from gateway.api.protocol import ChatCompletionChunk, ChunkChoice, DeltaBody, TiergateInfo, UsageBody, encode
from gateway.errors import error_body, to_gateway_error
from tiers import Event, Finished, TextDelta, Usage

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
    ) -> None:
        self._id = completion_id
        self._created = created
        self._model = model
        self._include_usage = include_usage
        self._info = info  # tiergate's own field, sent on the finishing chunk

    def _chunk(
        self,
        delta: DeltaBody,
        finish_reason: str | None = None,
        info: TiergateInfo | msgspec.UnsetType = msgspec.UNSET,
    ) -> bytes:
        choice = ChunkChoice(index=0, delta=delta, finish_reason=finish_reason)
        chunk = ChatCompletionChunk(self._id, self._created, self._model, [choice], tiergate=info)
        return frame(encode(chunk))

    def role(self) -> bytes:
        return self._chunk(DeltaBody(role="assistant", content=""))

    def text(self, text: str) -> bytes:
        return self._chunk(DeltaBody(content=text))

    def finish(self, reason: str, usage: Usage | None) -> bytes:
        out = self._chunk(DeltaBody(), reason, self._info)
        if self._include_usage and usage is not None:
            counts = UsageBody(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens)
            out += frame(encode(ChatCompletionChunk(self._id, self._created, self._model, [], usage=counts)))
        return out + DONE

    async def events(self, first: Event, rest: AsyncIterator[Event]) -> AsyncGenerator[bytes, None]:
        """The whole stream: role, text pieces, finish (+ usage), [DONE].

        ``first`` is the answer's first event after :class:`~tiers.Started`, ``rest`` what follows.
        An error after the first byte cannot change the status any more; it is
        sent as an OpenAI-shaped error event and the stream ends.
        """
        # The role and the first piece of text go out in one write: both are here already.
        opening = first.text if isinstance(first, TextDelta) else ""
        yield self.role() + self.text(opening) if opening else self.role()
        event = first
        try:
            while not isinstance(event, Finished):
                if isinstance(event, TextDelta) and event.text and event is not first:
                    yield self.text(event.text)
                event = await anext(rest)
        except StopAsyncIteration:
            yield self.finish("stop", None)
            return
        except Exception as exc:  # the tier failed mid-stream
            yield frame(msgspec.json.encode(error_body(to_gateway_error(exc))))
            return
        yield self.finish(event.reason, event.usage)
