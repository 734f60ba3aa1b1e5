"""What a generation yields: a stream of typed events, and the one collector that makes a JSON answer.

Every tier's :meth:`~tiers.Tier.generate` returns an :class:`EventStream`:

    Started        first: which replica or engine instance serves, and the model that answers
    TextDelta      a piece of the answer's text, as the engine makes it (any number)
    Finished       last: why the answer ended, and the tokens counted
    (next: ToolCallDelta, Logprobs, between Started and Finished)

A tier yields :class:`Started` only once the answer has begun (its first piece is ready), so an error
raised before any event means nothing was produced and another tier may serve the request; an error
after it ends the answer.  Closing the stream early (``aclose``) cancels the generation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from tiers._types import Completion, Usage


@dataclass(frozen=True, slots=True)
class Started:
    """The answer has begun: who serves it (``instance``) and the model answering (edge versions swap)."""

    instance: str = ""
    model: str = ""


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The answer ended: ``reason`` is OpenAI's finish_reason (stop, length, ...)."""

    reason: str
    usage: Usage


# Every event a tier yields; ToolCallDelta and Logprobs join this union.
Event = Started | TextDelta | Finished


class EventStream(Protocol):
    """An async iterator of events that can be closed early; an async generator is one."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    async def __anext__(self) -> Event: ...

    async def aclose(self) -> None: ...


# What collect() assumes of a stream that lacks its first or last event: built once, not per answer
# (collect runs for every JSON answer; measured, building them each time cost it a few microseconds).
_UNSTARTED = Started()
_UNFINISHED = Finished("stop", Usage(0, 0))


async def collect(events: EventStream) -> Completion:
    """The whole answer of ``events``, as a JSON response needs it; the stream is closed however this
    ends. A stream that ends without :class:`Finished` counts as stopped, with no tokens counted."""
    parts: list[str] = []
    started = _UNSTARTED
    finished = _UNFINISHED
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                parts.append(event.text)
            elif isinstance(event, Started):
                started = event
            elif isinstance(event, Finished):
                finished = event
                break
    finally:
        await events.aclose()
    return Completion("".join(parts), finished.reason, finished.usage, started.model, started.instance)
