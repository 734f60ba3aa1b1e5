"""The one collector every JSON answer goes through: text joined, finish and usage kept, who served
it, and the stream closed however collecting ends."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Sequence

import pytest

from tiers import Event, Finished, Started, TextDelta, TierFailed, Usage, collect


class Recorded:
    """An event stream that yields ``events`` (raising an exception where one stands) and records
    how far it was read and whether it was closed."""

    def __init__(self, events: Sequence[Event | Exception]) -> None:
        self._events = list(events)
        self.read = 0
        self.closed = False

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        if self.read == len(self._events):
            raise StopAsyncIteration
        item = self._events[self.read]
        self.read += 1
        if isinstance(item, Exception):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed = True


async def test_the_text_is_joined_with_the_finish_usage_and_who_served_it() -> None:
    events = Recorded(
        [Started("cloud-1", "smol"), TextDelta("Hel"), TextDelta("lo"), Finished("length", Usage(7, 2))]
    )
    answer = await collect(events)
    assert (answer.text, answer.finish_reason, answer.usage) == ("Hello", "length", Usage(7, 2))
    assert (answer.model, answer.instance) == ("smol", "cloud-1")
    assert events.closed


async def test_collecting_stops_at_the_finish_and_closes_the_stream() -> None:
    events = Recorded([Started(), TextDelta("a"), Finished("stop", Usage(1, 1)), TextDelta("not this")])
    assert (await collect(events)).text == "a"
    assert events.read == 3 and events.closed


async def test_an_error_mid_answer_propagates_and_the_stream_is_closed() -> None:
    events = Recorded([Started(), TextDelta("a"), TierFailed("cloud", "the engine died")])
    with pytest.raises(TierFailed, match="the engine died"):
        await collect(events)
    assert events.closed


async def test_an_async_generator_left_at_its_finish_runs_its_cleanup() -> None:
    cleaned = []

    async def generation() -> AsyncGenerator[Event, None]:
        try:
            yield Started()
            yield Finished("stop", Usage(0, 0))
            yield TextDelta("never read")
        finally:
            cleaned.append(True)

    assert (await collect(generation())).finish_reason == "stop"
    assert cleaned == [True]


async def test_a_stream_that_ends_without_its_finish_counts_as_stopped() -> None:
    answer = await collect(Recorded([Started("e/0", "m"), TextDelta("x")]))
    assert (answer.text, answer.finish_reason, answer.usage) == ("x", "stop", Usage(0, 0))
