from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator

import pytest

from gateway.errors import ServiceUnavailable
from gateway.ops.gates import Lane
from gateway.pipeline.admission import AdmissionSettings, Gate, LaneSettings, gates_for
from gateway.wire.chat import ChatCompletionRequest, parse_chat_request
from tests.pipeline import chat_service, complete, streamed
from tiers import (
    Capabilities,
    Event,
    Finished,
    Generation,
    Health,
    Modality,
    Started,
    TextDelta,
    TierOverloaded,
    TierState,
    TierUnavailable,
    Usage,
)
from tiers._slots import SustainedSlots


def settings(**kw: object) -> AdmissionSettings:
    base = dict(
        slow_cost=100.0,
        fast=LaneSettings(max_queue_delay_s=2.0),
        slow=LaneSettings(max_queue_delay_s=2.0),
        slow_share=3,
        initial_rate_per_s=2.0,
    )
    return AdmissionSettings(**{**base, **kw})  # type: ignore[arg-type]


async def test_free_slots_admit_at_once_then_requests_queue() -> None:
    gate = Gate("cloud", 2, settings())
    await gate.acquire(10)
    await gate.acquire(10)
    waiter = asyncio.create_task(gate.acquire(10))
    await asyncio.sleep(0)
    assert gate.waiting == 1 and not waiter.done()
    gate.release()
    await asyncio.wait_for(waiter, 1)
    assert gate.waiting == 0


async def test_beyond_the_bound_is_refused_at_once_with_the_expected_wait() -> None:
    gate = Gate("edge", 1, settings())  # 2/s × 2 s → 4 may wait per lane
    await gate.acquire(10)
    waiters = [asyncio.create_task(gate.acquire(10)) for _ in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(TierOverloaded, match="fast lane is full") as caught:
        await gate.acquire(10)
    assert caught.value.retry_after_s == pytest.approx(2.5)
    slow = asyncio.create_task(gate.acquire(500))  # the slow lane has its own bound: it queues
    await asyncio.sleep(0)
    assert not slow.done() and gate.waiting == 5
    for w in [*waiters, slow]:
        w.cancel()


async def test_fast_lane_goes_first_but_slow_is_not_starved() -> None:
    gate = Gate("cloud", 1, settings())
    await gate.acquire(10)
    order: list[str] = []

    async def one(name: str, cost: float) -> None:
        await gate.acquire(cost)
        order.append(name)

    tasks = [asyncio.create_task(one(f"slow{i}", 500)) for i in range(2)]
    tasks += [asyncio.create_task(one(f"fast{i}", 10)) for i in range(3)]
    await asyncio.sleep(0)
    for _ in range(5):
        gate.release()
        await asyncio.sleep(0)
    # grants 1, 2 → fast; grant 3 → slow (slow_share 3); then fast, slow
    assert order == ["fast0", "fast1", "slow0", "fast2", "slow1"]
    assert all(t.done() for t in tasks)


async def test_a_waiter_that_gives_up_leaves_no_hole() -> None:
    gate = Gate("cloud", 1, settings())
    await gate.acquire(10)
    quitter = asyncio.create_task(gate.acquire(10))
    stayer = asyncio.create_task(gate.acquire(10))
    await asyncio.sleep(0)
    quitter.cancel()
    await asyncio.sleep(0)
    gate.release()
    await asyncio.wait_for(stayer, 1)
    assert gate.waiting == 0


async def test_the_service_rate_is_measured_and_idle_time_does_not_lower_it() -> None:
    gate = Gate("cloud", 2, settings())
    assert gate.rate() == 2.0  # the configured guess until 8 have completed
    for _ in range(10):
        await gate.acquire(10)
        gate.release(service_s=0.05)
        await asyncio.sleep(0.01)  # idle between requests: not service time
    assert gate.rate() == pytest.approx(40)  # 2 slots / 0.05 s
    assert gate.bound(Lane.FAST) == 80  # 40 requests/s × 2 s tolerable delay


async def test_priority_tenants_go_ahead_in_their_lane() -> None:
    gate = Gate("cloud", 1, settings(priority_tenants=["gold"]))
    await gate.acquire(10)
    order: list[str] = []

    async def one(name: str, tenant: str) -> None:
        await gate.acquire(10, tenant)
        order.append(name)

    tasks = [asyncio.create_task(one(f"plain{i}", "default")) for i in range(2)]
    tasks.append(asyncio.create_task(one("gold0", "gold")))
    await asyncio.sleep(0)
    for _ in range(3):
        gate.release()
        await asyncio.sleep(0)
    assert order == ["gold0", "plain0", "plain1"]
    assert all(t.done() for t in tasks)


async def test_lane_waits_and_refusals_are_measured_with_their_reason() -> None:
    from gateway.errors import to_gateway_error
    from gateway.ops.metrics import Metrics
    from tests.gateway.ops.test_metrics import value

    metrics = Metrics()
    gate = Gate("edge", 1, settings(), metrics)
    await gate.acquire(10)  # a free slot: waited 0
    waiter = asyncio.create_task(gate.acquire(10))
    await asyncio.sleep(0.05)
    gate.release()
    await waiter  # waited ~50 ms for the slot
    queued = [asyncio.create_task(gate.acquire(10)) for _ in range(4)]
    await asyncio.sleep(0)
    with pytest.raises(TierOverloaded) as caught:
        await gate.acquire(10)
    assert to_gateway_error(caught.value).reason == "queue_fast"  # type: ignore[attr-defined]
    assert gate.arrivals == 7
    assert value(metrics, "tiergate_queue_wait_seconds_count", tier="edge", lane="fast") == 2
    assert value(metrics, "tiergate_queue_wait_seconds_sum", tier="edge", lane="fast") >= 0.04
    assert value(metrics, "tiergate_queue_wait_seconds_bucket", tier="edge", lane="fast", le="0.001") == 1
    for w in queued:
        w.cancel()


class Counting:
    """A tier that answers "0 1 2 ..." (``fail``: is down before its first event); records closes."""

    name = "edge"
    capabilities = Capabilities(frozenset({Modality.TEXT}), 2048, "m")

    def __init__(self) -> None:
        self.fail = False
        self.closed = 0

    def state(self) -> TierState:
        return TierState(self.name, Health.READY)

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        if self.fail:
            raise TierUnavailable(self.name, "down")
        try:
            yield Started("edge/0", "m")
            for i in range(gen.max_tokens or 1):
                yield TextDelta(f"{i} ")
            yield Finished("length", Usage(1, gen.max_tokens or 1))
        finally:
            self.closed += 1


def ask(max_tokens: int, *, stream: bool = False) -> ChatCompletionRequest:
    body = {"model": "edge", "messages": [{"role": "user", "content": "count"}], "max_tokens": max_tokens}
    return parse_chat_request(json.dumps({**body, "stream": stream}).encode())


async def test_the_gate_holds_a_slot_for_one_generation_however_it_ends() -> None:
    """Stage 7 takes the slot in the dispatcher; the request's ending releases it: a completed answer
    (its hold is a service time), a stream its client closed, a tier that failed."""
    inner = Counting()
    gates = gates_for({"edge": inner}, settings(slots={"edge": 1}))
    gate = gates.by_tier["edge"]
    chat = chat_service({"edge": inner}, gates=gates)
    _, body = await complete(chat, ask(3), "r1")
    assert body.choices[0].message.content == "0 1 2 "
    assert (gate.busy, len(gate._service_s), inner.closed) == (0, 1, 1)  # timed: it finished
    started = await streamed(chat, ask(3, stream=True), "r2")
    await anext(started.events)
    assert gate.busy == 1
    await started.events.aclose()  # the client went away: the slot frees, the tier's generation is closed
    assert (gate.busy, len(gate._service_s), inner.closed) == (0, 1, 2)
    inner.fail = True
    with pytest.raises(ServiceUnavailable):
        await complete(chat, ask(3), "r3")
    assert gate.busy == 0
    inner.fail = False
    await asyncio.wait_for(complete(chat, ask(3), "r4"), 1)  # the one slot is free again
    assert len(gate._service_s) == 2


async def test_slots_read_live_follow_the_tier_down_and_up() -> None:
    """A batching edge's slots change as its batch is measured: when they shrink, a freed slot is not
    passed on while the busy ones are over the count; when they grow, waiters take the new slots."""
    live = [3]
    gate = Gate("edge", lambda: live[0], settings())
    for _ in range(3):
        await gate.acquire(10)
    waiters = [asyncio.create_task(gate.acquire(10)) for _ in range(3)]
    await asyncio.sleep(0)
    live[0] = 1
    gate.release()
    gate.release()
    await asyncio.sleep(0)
    assert gate.waiting == 3 and not any(w.done() for w in waiters)  # one busy, one slot
    live[0] = 3
    gate.release()  # none busy now: three slots, three waiters
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    assert gate.waiting == 0 and gate.slots == 3
    assert Gate("edge", lambda: 0, settings()).slots == 1  # never below one


def test_a_batching_tiers_rate_counts_its_slots_at_their_width_never_below_one_slot() -> None:
    # Measured steps: alone 10 ms (100 tokens/s), 2 together 12.5 ms (160/s: 1.6x), 4 together
    # 18.75 and 25 ms (160/s: no gain over 2), so the batch sustains 2 slots.  Requests that ran 4 wide
    # held their slots 2.5 s each (1 s alone): slots / mean hold read 2 / 2.5 = 0.8 requests/s,
    # less than the serial edge's 1/s; at the width it sustains it serves 2 / 1.25 = 1.6/s.
    sustained = SustainedSlots(4, clock=lambda: 0.0)
    for _ in range(16):
        sustained.step(1, 0.010)
        sustained.step(2, 0.0125)
        sustained.step(3, 0.01875)
        sustained.step(4, 0.025)
    assert sustained.slots == 2
    serial = Gate("edge", 1, settings())
    batched = Gate("edge", lambda: sustained.slots, settings(), slowdown=sustained.slowdown)
    for _ in range(8):
        serial._busy = batched._busy = 1
        serial.release(service_s=1.0)
        batched.release(service_s=2.5, width=4)
    assert serial.rate() == pytest.approx(1.0)
    assert batched.rate() == pytest.approx(1.6)
    assert batched.bound(Lane.FAST) >= serial.bound(Lane.FAST)


class Batching(Counting):
    """A tier that runs two at once, each token of two together taking twice as long: it records the
    widths it was asked the slowdown of."""

    concurrency = 2

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def slowdown_at(self, width: int) -> float:
        self.asked.append(width)
        return float(min(width, 2))


async def test_admit_takes_each_hold_at_the_width_it_ran_at_from_the_tiers_slowdown() -> None:
    inner = Batching()
    gates = gates_for({"edge": inner}, settings(slots={}))
    assert gates.by_tier["edge"].slots == 2
    chat = chat_service({"edge": inner}, gates=gates)
    alone = await streamed(chat, ask(1, stream=True), "r1")
    await anext(alone.events)  # one runs alone ...
    beside = await streamed(chat, ask(1, stream=True), "r2")
    await anext(beside.events)  # ... and one beside it: width 2
    [_ async for _ in beside.events]
    [_ async for _ in alone.events]
    assert inner.asked == [2, 1]  # each hold taken back to alone by the slowdown at its width
