"""The benchmarks' load generator: evenly spaced open-loop arrivals, latency from the write,
and no request held back behind a slow one."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest

from bench import loadgen


@pytest.fixture
def slow_every_tenth() -> Iterator[str]:
    """A loopback HTTP server that answers at once, except every 10th request after 200 ms."""
    loop = asyncio.new_event_loop()
    count = 0

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                count += 1
                if count % 10 == 0:
                    await asyncio.sleep(0.2)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = loop.run_until_complete(asyncio.start_server(serve, "127.0.0.1", 0))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/v1/chat/completions"
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_open_loop_keeps_its_schedule_when_some_answers_are_slow(slow_every_tenth: str) -> None:
    started = time.perf_counter()
    samples, failed = loadgen.run(slow_every_tenth, b"{}", duration=1.0, rate=100)
    elapsed = time.perf_counter() - started
    assert failed == 0 and len(samples) == 100 and all(s.ok for s in samples)
    # arrivals 10 ms apart, whatever the slow answers did (a closed loop would have waited)
    assert [round(s.sent, 3) for s in samples[:3]] == [0.0, 0.01, 0.02]
    lags = sorted(s.lag for s in samples)
    assert lags[50] < 0.02 and lags[-1] < 0.15  # none waited for a slow answer (200 ms)
    slow = [s for s in samples if s.total > 0.15]
    fast = sorted(s.total for s in samples if s.total <= 0.15)
    assert len(slow) == 10 and fast[len(fast) // 2] < 0.01
    assert elapsed < 1.6  # the run ends with its last answer, not 10 x 200 ms later


def test_closed_loop_counts_every_answer(slow_every_tenth: str) -> None:
    samples, failed = loadgen.run(slow_every_tenth, b"{}", duration=0.5, rate=None, connections=4)
    assert failed == 0 and samples and all(s.ok and s.total > 0 for s in samples)


def test_a_fixed_number_of_requests_closed_and_open_loop(slow_every_tenth: str) -> None:
    samples, failed = loadgen.run(slow_every_tenth, b"{}", requests=37, rate=None, connections=4)
    assert failed == 0 and len(samples) == 37 and all(s.ok for s in samples)
    samples, failed = loadgen.run(slow_every_tenth, b"{}", requests=25, rate=500)
    assert failed == 0 and len(samples) == 25 and all(s.ok for s in samples)
    assert round(samples[-1].sent, 3) == 0.048  # 2 ms apart
    with pytest.raises(ValueError, match="duration or a number"):
        loadgen.run(slow_every_tenth, b"{}")
