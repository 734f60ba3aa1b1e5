"""The serial engine's one generation method, on a stand-in engine (no model): the answer's events in
order, errors before the first event, and an early close that stops the engine at its next token."""

from __future__ import annotations

import asyncio
import threading

import pytest

from tiers import Finished, Generation, Started, TextDelta, TierRejected, TierUnavailable, Usage, collect
from tiers.edge import EdgeConfig, SerialEngineTier
from tiers.edge._serial import Emit


class CountingEngine(SerialEngineTier):
    """Emits "0 ", "1 ", ... one token every ``delay_s`` until max_tokens; a prompt "refuse" is refused."""

    def __init__(self, delay_s: float = 0.0) -> None:
        super().__init__(EdgeConfig(model_name="counting", prefix_cache_mb=0), instance="counting/0")
        self.delay_s = delay_s
        self.tokens = 0  # made by the engine, cancelled generations included
        self.stopped = threading.Event()  # a generation ended on its cancel flag

    def _load(self) -> None:
        pass

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        if gen.messages[0]["content"] == "refuse":
            raise TierRejected(self.name, "the prompt is too long")
        for i in range(gen.max_tokens or 1):
            if cancel.wait(self.delay_s):
                self.stopped.set()
                return
            self.tokens += 1
            emit(TextDelta(f"{i} "))
        emit(Finished("length", Usage(3, gen.max_tokens or 1)))


def _gen(content: str = "count", max_tokens: int = 3) -> Generation:
    return Generation(messages=[{"role": "user", "content": content}], max_tokens=max_tokens)


async def test_started_comes_first_with_the_instance_and_model_then_the_pieces_and_the_finish() -> None:
    engine = CountingEngine()
    await engine.start()
    try:
        events = [e async for e in engine.generate(_gen())]
        assert events == [
            Started("counting/0", "counting"),
            TextDelta("0 "),
            TextDelta("1 "),
            TextDelta("2 "),
            Finished("length", Usage(3, 3)),
        ]
        answer = await collect(engine.generate(_gen(max_tokens=2)))
        assert (answer.text, answer.instance, answer.usage.completion_tokens) == ("0 1 ", "counting/0", 2)
    finally:
        await engine.aclose()


async def test_errors_come_before_any_event() -> None:
    engine = CountingEngine()
    events = engine.generate(_gen())
    with pytest.raises(TierUnavailable, match="loading model"):  # not started yet
        await anext(events)
    await engine.start()
    try:
        events = engine.generate(_gen("refuse"))
        with pytest.raises(TierRejected, match="too long"):
            await anext(events)
        assert (await collect(engine.generate(_gen(max_tokens=1)))).text == "0 "  # the engine is free
    finally:
        await engine.aclose()


async def test_closing_the_stream_early_stops_the_engine_and_frees_it() -> None:
    engine = CountingEngine(delay_s=0.01)
    await engine.start()
    try:
        events = engine.generate(_gen(max_tokens=10_000))
        assert isinstance(await anext(events), Started)
        assert isinstance(await anext(events), TextDelta)
        await events.aclose()
        assert await asyncio.to_thread(engine.stopped.wait, 5)
        made = engine.tokens
        assert made < 100
        for _ in range(100):  # the lock is freed once the worker has returned
            if engine.load == 0:
                break
            await asyncio.sleep(0.01)
        assert engine.load == 0
        assert (await collect(engine.generate(_gen(max_tokens=1)))).text == "0 "
        assert engine.tokens == made + 1  # nothing of the closed generation ran on
    finally:
        await engine.aclose()
