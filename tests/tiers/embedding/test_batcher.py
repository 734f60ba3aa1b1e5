"""The embedding tier's batcher: how waiting inputs become ONNX calls, and its bounds (no model here)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence

import numpy as np
import pytest

from tiers import TierOverloaded
from tiers.embedding import Batcher, plan_calls


def test_calls_are_cut_by_rows_and_padded_tokens_shortest_first() -> None:
    assert plan_calls([3, 1, 2], max_batch=2, max_tokens=100) == [[1, 2], [0]]
    # a long row goes alone rather than padding the short ones to its length
    assert plan_calls([2, 2, 50], max_batch=8, max_tokens=60) == [[0, 1], [2]]
    assert plan_calls([], max_batch=4, max_tokens=10) == []


class Recorded:
    """A stand-in model: row i's vector is [len(row), first id, 0, ...]; the calls it got are kept."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.calls: list[list[list[int]]] = []
        self.gate = gate

    def __call__(self, rows: Sequence[Sequence[int]]) -> np.ndarray:
        if self.gate is not None:
            self.gate.wait(5)
        self.calls.append([list(r) for r in rows])
        out = np.zeros((len(rows), 4), dtype=np.float32)
        for i, row in enumerate(rows):
            out[i, :2] = len(row), row[0]
        return out


async def test_inputs_of_requests_that_wait_together_share_calls_and_come_back_in_order() -> None:
    gate = threading.Event()
    model = Recorded(gate)
    batcher = Batcher(model, 4, name="embedding", max_batch=4, max_batch_tokens=1000, max_queue=100)
    batcher.start()
    first = asyncio.create_task(batcher.embed([[7]]))  # runs alone while the others queue
    await asyncio.sleep(0.05)
    others = [asyncio.create_task(batcher.embed([[i] * (i + 1), [i + 10]])) for i in range(3)]
    await asyncio.sleep(0.05)
    gate.set()
    results = await asyncio.gather(first, *others)
    assert results[0][:, :2].tolist() == [[1, 7]]
    for i, vectors in enumerate(results[1:]):
        assert vectors[:, :2].tolist() == [[i + 1, i], [1, i + 10]]
    assert [len(c) for c in model.calls] == [1, 4, 2]  # 6 waiting rows: calls of at most 4
    assert batcher.queued == 0
    await batcher.aclose()


async def test_a_full_queue_is_a_429_at_once_and_an_engine_failure_reaches_every_caller() -> None:
    gate = threading.Event()
    model = Recorded(gate)
    batcher = Batcher(model, 4, name="embedding", max_batch=64, max_batch_tokens=10_000, max_queue=3)
    batcher.start()
    running = asyncio.create_task(batcher.embed([[1], [2]]))
    await asyncio.sleep(0.02)
    with pytest.raises(TierOverloaded):
        await batcher.embed([[1], [2]])  # 2 waiting + 2 > 3
    gate.set()
    await running
    assert batcher.queued == 0

    def broken(rows: Sequence[Sequence[int]]) -> np.ndarray:
        raise RuntimeError("engine down")

    failing = Batcher(broken, 4, name="embedding", max_batch=2, max_batch_tokens=100, max_queue=10)
    failing.start()
    results = await asyncio.gather(failing.embed([[1]]), failing.embed([[2]]), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    assert failing.queued == 0
    await asyncio.gather(batcher.aclose(), failing.aclose())


async def test_a_caller_that_leaves_does_not_hold_the_others() -> None:
    gate = threading.Event()
    batcher = Batcher(Recorded(gate), 4, name="embedding", max_batch=8, max_batch_tokens=100, max_queue=10)
    batcher.start()
    busy = asyncio.create_task(batcher.embed([[1]]))
    await asyncio.sleep(0.02)
    gone = asyncio.create_task(batcher.embed([[2]]))
    stays = asyncio.create_task(batcher.embed([[3]]))
    await asyncio.sleep(0.02)
    gone.cancel()
    gate.set()
    await busy
    assert (await stays)[0, 1] == 3
    await asyncio.sleep(0.01)
    assert batcher.queued == 0
    await batcher.aclose()


class Turns:
    """A gate that lets one call through per :meth:`let_one` (a Recorded model's ``gate``)."""

    def __init__(self) -> None:
        self._permits = threading.Semaphore(0)

    def wait(self, timeout: float) -> bool:
        return self._permits.acquire(timeout=timeout)

    def let_one(self) -> None:
        self._permits.release()


async def test_one_request_at_a_time_goes_straight_out_and_latecomers_are_never_left_waiting() -> None:
    """An idle batcher runs a lone request's call from the caller's task; inputs that arrive while a
    call runs (the caller's own or the batching task's) go out in the round after it."""
    turns = Turns()
    model = Recorded(turns)  # type: ignore[arg-type]
    batcher = Batcher(model, 4, name="embedding", max_batch=8, max_batch_tokens=100, max_queue=10)
    batcher.start()
    first = asyncio.create_task(batcher.embed([[3]]))  # straight out, held at the gate
    await asyncio.sleep(0.02)
    second = asyncio.create_task(batcher.embed([[4]]))  # waits for it
    await asyncio.sleep(0.02)
    turns.let_one()
    assert int((await first)[0, 1]) == 3
    await asyncio.sleep(0.02)  # the batching task's round with [4], held at the gate
    third = asyncio.create_task(batcher.embed([[6]]))  # arrives during that round
    await asyncio.sleep(0.02)
    turns.let_one()
    turns.let_one()
    done = await asyncio.wait_for(asyncio.gather(second, third), 5)
    assert [int(v[0, 1]) for v in done] == [4, 6]
    assert model.calls == [[[3]], [[4]], [[6]]]
    assert batcher.queued == 0
    await batcher.aclose()
