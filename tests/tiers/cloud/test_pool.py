"""The vLLM pool's one generation method against fake vLLM servers: a JSON answer and a streamed one
(usage and finish reason arrive either way), a failure before the first event retried on another
replica, and an early close that drops the upstream request."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest

from tests.fakes import FakeVLLM
from tiers import Finished, Generation, Health, Started, TextDelta, Usage, collect
from tiers.cloud import CloudConfig, VLLMPool
from tiers.cloud._replica import EngineLoad


def _gen(stream: bool) -> Generation:
    return Generation(messages=[{"role": "user", "content": "Say hello."}], max_tokens=8, stream=stream)


@pytest.fixture
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM() as server:
        yield server


@contextlib.asynccontextmanager
async def _pool(*urls: str) -> AsyncIterator[VLLMPool]:
    config = msgspec.convert({"urls": list(urls), "health_interval_s": 0.1}, CloudConfig)
    pool = VLLMPool(config)
    await pool.start()
    try:
        for _ in range(100):
            if pool.state().detail.startswith(f"{len(urls)}/{len(urls)}"):
                break
            await asyncio.sleep(0.05)
        assert pool.state().health is Health.READY
        yield pool
    finally:
        await pool.aclose()


async def test_a_json_answer_is_one_body_and_a_streamed_one_keeps_its_pieces(fake: FakeVLLM) -> None:
    async with _pool(fake.url) as pool:
        answer = await collect(pool.generate(_gen(stream=False)))
        assert (answer.text, answer.finish_reason, answer.usage) == ("fake answer", "stop", Usage(3, 2))
        assert (answer.model, answer.instance) == ("fake", "cloud-0")
        assert fake.requests[-1]["stream"] is False
        events = [e async for e in pool.generate(_gen(stream=True))]
        assert events == [
            Started("cloud-0", "fake"),
            TextDelta("part one, "),
            TextDelta("part two"),
            Finished("stop", Usage(3, 2)),  # from the usage chunk vLLM sends last
        ]
        assert fake.requests[-1]["stream_options"] == {"include_usage": True}
        assert pool.state().in_flight == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_a_replica_failing_before_the_first_event_is_retried_on_another(stream: bool) -> None:
    with FakeVLLM("reset") as bad, FakeVLLM() as good:
        async with _pool(bad.url, good.url) as pool:
            for i in range(40):  # conversations spread over both: until one went to the bad one
                gen = dataclasses.replace(_gen(stream), affinity=f"conversation {i}")
                answer = await collect(pool.generate(gen))
                assert answer.instance == "cloud-1" and answer.usage == Usage(3, 2)
                if bad.requests:
                    break
            assert bad.requests and pool.state().in_flight == 0


async def test_closing_a_stream_early_drops_the_upstream_request() -> None:
    with FakeVLLM("slow_stream", delay_s=0.05) as fake:
        async with _pool(fake.url) as pool:
            events = pool.generate(_gen(stream=True))
            assert isinstance(await anext(events), Started)
            assert isinstance(await anext(events), TextDelta)
            await events.aclose()
            assert pool.state().in_flight == 0
            for _ in range(100):
                if fake.disconnects:
                    break
                await asyncio.sleep(0.05)
            assert fake.disconnects == 1


async def test_vllms_waiting_requests_are_queued_not_also_in_flight_and_its_full_batch_is_its_slots(
    fake: FakeVLLM,
) -> None:
    # The router's wait for the cloud comes from these counts.  Without slots its book read vLLM,
    # which batches everything it is sent, as one slot serving its requests in turn, and vLLM's
    # waiting requests were counted in in_flight and again as queued.
    async with _pool(fake.url) as pool:
        replica = pool._replicas[0]
        replica.in_flight = 5
        replica.scraped(EngineLoad(waiting=0, running=5))
        state = pool.state()
        assert (state.in_flight, state.queued, state.slots) == (5, 0, 6)  # none queued: one starts now
        replica.in_flight = 7
        replica.scraped(EngineLoad(waiting=4, running=3))  # full: it runs 3 at once
        state = pool.state()
        assert (state.in_flight, state.queued, state.slots) == (3, 4, 3)
        replica.scraped(EngineLoad(waiting=9, running=3))  # other clients' wait too: all are queued
        state = pool.state()
        assert (state.in_flight, state.queued, state.slots) == (0, 9, 3)
        replica.in_flight = 2  # drained below its batch: a free slot
        replica.scraped(EngineLoad(waiting=0, running=2))
        state = pool.state()
        assert (state.in_flight, state.queued, state.slots) == (2, 0, 3)
        replica.in_flight = 0
