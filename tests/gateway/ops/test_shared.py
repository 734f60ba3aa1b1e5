"""Shared state between gateway instances, in one process over a real Redis: breaker openings and
closings travel both ways, a late starter catches up, and a Redis that is away changes nothing
locally."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.ops.shared import Bus, SharedState
from router import BreakerBoard, BreakerConfig, BreakerState
from tests.conftest import free_port
from tiers import Modality

CONFIG = BreakerConfig(consecutive_failures=2, cooldown_s=30.0)
IMAGE = frozenset({Modality.TEXT, Modality.IMAGE})


class Instance:
    def __init__(self, url: str, name: str, prefix: str) -> None:
        self.now = time.monotonic()
        self.shared = SharedState(Bus(url, prefix=prefix, instance=name), CONFIG)
        self.board = BreakerBoard(CONFIG, lambda: self.now, on_transition=self.shared.breaker_changed)
        self.shared.attach(self.board)

    def state(self) -> BreakerState:
        found = [b.state for b in self.board.snapshot() if b.modality is Modality.IMAGE]
        return found[0] if found else BreakerState.CLOSED


async def eventually(check: Callable[[], bool]) -> None:
    """Poll ``check`` (state changes arrive from Redis, nothing here can be awaited on)."""
    for _ in range(250):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("timed out after 5 s")


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[Instance, Instance, str]]:
    prefix = f"test:{free_port()}:"
    a, b = Instance(redis_url, "a", prefix), Instance(redis_url, "b", prefix)
    await a.shared.start()
    await b.shared.start()
    yield a, b, prefix
    await a.shared.aclose()
    await b.shared.aclose()


async def test_an_opening_and_a_closing_reach_the_other_instance(
    pair: tuple[Instance, Instance, str],
) -> None:
    a, b, _ = pair
    for _ in range(2):
        assert a.board.acquire("cloud", IMAGE)
        a.board.record("cloud", IMAGE, ok=False, why="HTTP 500")
    assert a.state() is BreakerState.OPEN
    await eventually(lambda: b.state() is BreakerState.OPEN)
    assert Modality.IMAGE in b.board.open_modalities("cloud")
    assert b.board.snapshot()[0].last_failure == "HTTP 500"
    # After B's cool-down, B's probe succeeds: closed in A too.
    b.now += CONFIG.cooldown_s + 1
    assert b.state() is BreakerState.HALF_OPEN
    assert a.state() is BreakerState.OPEN  # half-open is each instance's own
    assert b.board.acquire("cloud", IMAGE)
    b.board.record("cloud", IMAGE, ok=True)
    await eventually(lambda: a.state() is BreakerState.CLOSED)


async def test_an_instance_that_starts_later_takes_the_open_breakers(
    pair: tuple[Instance, Instance, str], redis_url: str
) -> None:
    a, _, prefix = pair
    for _ in range(2):
        a.board.record("cloud", IMAGE, ok=False)
    await asyncio.sleep(0.2)  # let the news be stored
    late = Instance(redis_url, "late", prefix)
    await late.shared.start()
    try:
        assert late.state() is BreakerState.OPEN
    finally:
        await late.shared.aclose()


async def test_without_redis_each_instance_goes_on_alone() -> None:
    alone = Instance(f"redis://127.0.0.1:{free_port()}/0", "alone", "test:")
    started = time.monotonic()
    await alone.shared.start()
    assert time.monotonic() - started < 10
    for _ in range(2):
        alone.board.record("cloud", IMAGE, ok=False)  # publishing is queued, never raised
    assert alone.state() is BreakerState.OPEN
    await alone.shared.aclose()
