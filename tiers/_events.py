"""What a generation yields: a stream of typed events, and the one collector that makes a JSON answer.

Every tier's :meth:`~tiers.Tier.generate` returns an :class:`EventStream`:

    Started        first: which replica or engine instance serves, and the model that answers
    TextDelta      a piece of a choice's text, as the engine makes it (any number)
    ToolCallDelta  a piece of a choice's tool call: its id and name first, then argument text
    Logprobs       the log-probabilities of a choice's next tokens (when the request asked for them)
    ChoiceDone     a choice ended (only when the request asked for n > 1 answers)
    Finished       last: why the answer ended (choices without a ChoiceDone), and the tokens counted

A tier yields :class:`Started` only once the answer has begun (its first piece is ready), so an error
raised before any event means nothing was produced and another tier may serve the request; an error
after it ends the answer.  Closing the stream early (``aclose``) cancels the generation.

The events are msgspec structs: the result cache stores an answer's events as they came and replays
them (:func:`encode_events`, :func:`decode_events`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from tiers._types import Usage


class Started(msgspec.Struct, frozen=True, tag="started"):
    """The answer has begun: who serves it (``instance``) and the model answering (edge versions swap)."""

    instance: str = ""
    model: str = ""


class TextDelta(msgspec.Struct, frozen=True, tag="text"):
    text: str
    choice: int = 0


class ToolCallDelta(msgspec.Struct, frozen=True, tag="tool"):
    """Part of tool call ``index`` of a choice: the first part carries its ``id`` (``call_…``) and
    ``name``, later ones only ``arguments`` text (their concatenation is the arguments' JSON)."""

    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""
    choice: int = 0


class TopLogprob(msgspec.Struct, frozen=True, array_like=True):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(msgspec.Struct, frozen=True, array_like=True):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top: list[TopLogprob] = msgspec.field(default_factory=list)


class Logprobs(msgspec.Struct, frozen=True, tag="logprobs"):
    """The log-probabilities of the tokens a choice produced next, in order."""

    tokens: list[TokenLogprob]
    choice: int = 0


class ChoiceDone(msgspec.Struct, frozen=True, tag="done"):
    choice: int
    reason: str


class Finished(msgspec.Struct, frozen=True, tag="finished"):
    """The answer ended: ``reason`` is OpenAI's finish_reason (stop, length, tool_calls, ...) of every
    choice that had no :class:`ChoiceDone`."""

    reason: str
    usage: Usage
    # The stop sequence (of the request's ``stop``) that ended the answer, when one did: Anthropic's
    # Messages API names it (``stop_sequence``), where finish_reason says "stop" for it and for the
    # model's own end alike.
    stop: str = ""


Event = Started | TextDelta | ToolCallDelta | Logprobs | ChoiceDone | Finished


class EventStream(Protocol):
    """An async iterator of events that can be closed early; an async generator is one."""

    def __aiter__(self) -> AsyncIterator[Event]: ...

    async def __anext__(self) -> Event: ...

    async def aclose(self) -> None: ...


_events_encoder = msgspec.msgpack.Encoder()
_events_decoder = msgspec.msgpack.Decoder(list[Event])


def encode_events(events: Sequence[Event]) -> bytes:
    return _events_encoder.encode(events)


def decode_events(data: bytes) -> list[Event]:
    """Raises :class:`msgspec.DecodeError` for data that is not a list of events."""
    return _events_decoder.decode(data)


# -- the whole answer ------------------------------------------------------------------------------


@dataclass(slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclass(slots=True)
class Choice:
    """One answer of a completion: its text or tool calls, how it ended, and its tokens' logprobs."""

    index: int
    text: str = ""
    finish_reason: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None


@dataclass(slots=True)
class Completion:
    """A whole answer (every choice), as a JSON response needs it."""

    choices: list[Choice]
    usage: Usage
    model: str
    instance: str = ""  # which replica or engine instance served it

    @property
    def text(self) -> str:
        return self.choices[0].text

    @property
    def finish_reason(self) -> str:
        return self.choices[0].finish_reason


# What collect() assumes of a stream that lacks its first or last event: built once, not per answer
# (collect runs for every JSON answer; measured, building them each time cost it a few microseconds).
_UNSTARTED = Started()
_UNFINISHED = Finished("stop", Usage(0, 0))


class _Assembly:
    """A choice being put together from its deltas."""

    __slots__ = ("calls", "logprobs", "parts", "reason")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.calls: list[ToolCall] = []
        self.logprobs: list[TokenLogprob] | None = None
        self.reason = ""

    def tool(self, delta: ToolCallDelta) -> None:
        if delta.index >= len(self.calls):
            self.calls.append(ToolCall(delta.id, delta.name, delta.arguments))
        else:
            self.calls[delta.index].arguments += delta.arguments


def assemble(events: Sequence[Event]) -> Completion:
    """The whole answer the events of one generation make (they need not end in :class:`Finished`:
    a choice that never ended counts as stopped, with no tokens counted)."""
    started = _UNSTARTED
    finished = _UNFINISHED
    choices: dict[int, _Assembly] = {0: _Assembly()}
    for event in events:
        if type(event) is TextDelta:
            (choices.get(event.choice) or choices.setdefault(event.choice, _Assembly())).parts.append(
                event.text
            )
        elif isinstance(event, ToolCallDelta):
            choices.setdefault(event.choice, _Assembly()).tool(event)
        elif isinstance(event, Logprobs):
            a = choices.setdefault(event.choice, _Assembly())
            a.logprobs = [*(a.logprobs or ()), *event.tokens]
        elif isinstance(event, ChoiceDone):
            choices.setdefault(event.choice, _Assembly()).reason = event.reason
        elif isinstance(event, Started):
            started = event
        elif isinstance(event, Finished):
            finished = event
            break
    return Completion(
        [
            Choice(i, "".join(a.parts), a.reason or finished.reason, a.calls, a.logprobs)
            for i, a in sorted(choices.items())
        ],
        finished.usage,
        started.model,
        started.instance,
    )


async def collect(events: EventStream) -> Completion:
    """The whole answer of ``events``, as a JSON response needs it; the stream is closed however this
    ends. A stream that ends without :class:`Finished` counts as stopped, with no tokens counted."""
    read: list[Event] = []
    try:
        async for event in events:
            read.append(event)
            if isinstance(event, Finished):
                break
    finally:
        await events.aclose()
    return assemble(read)
