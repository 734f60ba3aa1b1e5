"""An HTTP/1.1 load generator for the benchmarks: open loop at a fixed rate, or closed loop.

Why not ``hey -q``: its rate limit is per worker and every worker's ticker starts at the
same instant, so at 500 RPS over 20 workers it sends bursts of 20 requests every 40 ms.
Each burst queues behind itself and what is measured is mostly the burst, not the server.
Here the requests of an open-loop run are spaced evenly (``1/rate`` apart, as wrk2 does),
each on an idle keep-alive connection, or a new one when all are busy, so no request is
held back by a slow earlier one (no coordinated omission).  Timers have 1 ms granularity:
at 2,000 RPS two requests leave per tick.  Latency runs from the moment a request is
written; ``lag`` (how late the generator was against the schedule) is reported so a run
where the generator fell behind can be told apart.

Responses are parsed with httptools (uvicorn's parser), so chunked SSE bodies work; the
time of the first body byte is the streaming "time to first chunk".

    python -m bench.loadgen URL BODY_FILE [--rate 500 | --connections 64] [--duration 5]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import random
import statistics
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools
import uvloop

POISSON_SEED = 33


@dataclass(slots=True)
class Sample:
    sent: float  # seconds since the run started
    total: float = 0.0  # seconds from the write to the last byte
    first_byte: float = 0.0  # seconds from the write to the first body byte
    status: int = 0
    lag: float = 0.0  # seconds the write was later than scheduled

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass(slots=True)
class _Pending:
    sample: Sample
    written: float
    done: asyncio.Future[None]


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request in flight at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.pending: _Pending | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not an asyncio.Transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        if self.pending is not None and not self.pending.done.done():
            self.pending.done.set_exception(ConnectionError("connection closed mid-response"))

    def send(self, request: bytes, sample: Sample) -> asyncio.Future[None]:
        assert self.transport is not None
        done = asyncio.get_running_loop().create_future()
        self.pending = _Pending(sample, time.perf_counter(), done)
        self.transport.write(request)
        return done

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.pending is not None and not self.pending.done.done():
                self.pending.done.set_exception(exc)
            assert self.transport is not None
            self.transport.close()

    # httptools callbacks
    def on_headers_complete(self) -> None:
        assert self.pending is not None
        self.pending.sample.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        pending = self.pending
        if pending is not None and not pending.sample.first_byte:
            pending.sample.first_byte = time.perf_counter() - pending.written

    def on_message_complete(self) -> None:
        pending, self.pending = self.pending, None
        assert pending is not None
        now = time.perf_counter()
        pending.sample.total = now - pending.written
        if not pending.sample.first_byte:
            pending.sample.first_byte = pending.sample.total
        pending.done.set_result(None)


class LoadGenerator:
    def __init__(self, url: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        head = [
            f"POST {parts.path or '/'} HTTP/1.1",
            f"Host: {parts.netloc}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            *(f"{k}: {v}" for k, v in (headers or {}).items()),
        ]
        self.request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        self.idle: list[_Connection] = []
        self.connections: list[_Connection] = []
        self.errors = 0
        self.reconnects = 0

    async def _connection(self, *, fresh: bool = False) -> tuple[_Connection, bool]:
        """An idle connection (and True: reused), else a new one."""
        while self.idle and not fresh:
            conn = self.idle.pop()
            if not conn.closed.done():
                return conn, True
        _, conn = await asyncio.get_running_loop().create_connection(_Connection, self.host, self.port)
        self.connections.append(conn)
        return conn, False

    async def _one(self, sample: Sample, t0: float) -> None:
        conn, reused = await self._connection()
        sample.lag = max(0.0, time.perf_counter() - t0 - sample.sent)
        try:
            await conn.send(self.request, sample)
        except (ConnectionError, httptools.HttpParserError):
            if not (reused and sample.status == 0):
                self.errors += 1
                return
            # The server closed this idle keep-alive connection as the request went out (its
            # idle timeout), as any HTTP client meets: once more on a new connection.
            self.reconnects += 1
            conn, _ = await self._connection(fresh=True)
            try:
                await conn.send(self.request, sample)
            except (ConnectionError, httptools.HttpParserError):
                self.errors += 1
                return
        if not conn.closed.done():
            self.idle.append(conn)

    async def open_loop(
        self, rate: float, duration: float, requests: int | None = None, poisson: bool = False
    ) -> list[Sample]:
        """Send ``rate`` requests a second for ``duration`` seconds (or ``requests``): evenly spaced,
        or with ``poisson`` at exponentially distributed gaps (a Poisson process; seeded, so every
        target of a run gets the same arrival times)."""
        loop = asyncio.get_running_loop()
        count = requests if requests is not None else int(rate * duration)
        if poisson:
            gaps = random.Random(POISSON_SEED)
            at = list(itertools.accumulate(gaps.expovariate(rate) for _ in range(count)))
            samples = [Sample(sent=t) for t in at]
        else:
            samples = [Sample(sent=i / rate) for i in range(count)]
        tasks: list[asyncio.Task[None]] = []
        t0 = time.perf_counter()
        next_index = 0
        while next_index < count:
            now = time.perf_counter() - t0
            while next_index < count and samples[next_index].sent <= now:
                tasks.append(loop.create_task(self._one(samples[next_index], t0)))
                next_index += 1
            if next_index < count:
                await asyncio.sleep(max(0.0, samples[next_index].sent - (time.perf_counter() - t0)))
        await asyncio.gather(*tasks, return_exceptions=True)
        return samples

    async def closed_loop(
        self, connections: int, duration: float, requests: int | None = None
    ) -> list[Sample]:
        """``connections`` clients, each sending its next request when the last one ends, for
        ``duration`` seconds or until ``requests`` requests have been sent, whichever comes first."""
        samples: list[Sample] = []
        t0 = time.perf_counter()
        end = t0 + duration
        limit = requests if requests is not None else -1

        async def client() -> None:
            conn: _Connection | None = None
            while time.perf_counter() < end and len(samples) != limit:
                if conn is None or conn.closed.done():
                    conn, _ = await self._connection(fresh=True)
                sample = Sample(sent=time.perf_counter() - t0)
                samples.append(sample)
                try:
                    await conn.send(self.request, sample)
                except (ConnectionError, httptools.HttpParserError):
                    self.errors += 1
                    conn = None

        await asyncio.gather(*(client() for _ in range(connections)))
        return samples

    def close(self) -> None:
        for conn in self.connections:
            if conn.transport is not None:
                conn.transport.close()


def run(
    url: str,
    body: bytes,
    *,
    duration: float = float("inf"),
    rate: float | None = None,
    connections: int = 64,
    headers: dict[str, str] | None = None,
    requests: int | None = None,
    poisson: bool = False,
) -> tuple[list[Sample], int]:
    """One run on a fresh event loop; returns the samples and the count of failed connections.

    ``requests``: a fixed number of requests (open loop: all of them, ``1 / rate`` apart; closed loop:
    the run ends when that many were sent and answered, or at ``duration``).  ``poisson``: open loop
    with Poisson arrivals at ``rate`` instead of evenly spaced ones."""
    if requests is None and duration == float("inf"):
        raise ValueError("a run needs a duration or a number of requests")

    async def go() -> tuple[list[Sample], int]:
        gen = LoadGenerator(url, body, headers)
        try:
            if rate is not None:
                samples = await gen.open_loop(rate, duration, requests, poisson)
            else:
                samples = await gen.closed_loop(connections, duration, requests)
        finally:
            gen.close()
        return samples, gen.errors

    return uvloop.run(go())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("body", help="a file holding the JSON body")
    parser.add_argument("--rate", type=float, help="open loop: requests per second")
    parser.add_argument("--connections", type=int, default=64, help="closed loop: concurrent clients")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("-H", "--header", action="append", default=[], help="'Name: value'")
    args = parser.parse_args()
    headers = dict(h.split(": ", 1) for h in args.header)
    with open(args.body, "rb") as f:
        body = f.read()
    samples, errors = run(
        args.url, body, duration=args.duration, rate=args.rate, connections=args.connections, headers=headers
    )
    ok = [s for s in samples if s.ok]

    def q(values: list[float], p: float) -> float:
        values = sorted(values)
        return values[min(len(values) - 1, int(p / 100 * len(values)))] * 1000 if values else float("nan")

    print(
        json.dumps(
            {
                "requests": len(samples),
                "ok": len(ok),
                "connection_errors": errors,
                "statuses": dict(collections.Counter(str(s.status) for s in samples)),
                "rps": round(len(ok) / args.duration, 1),
                **{f"p{p}_ms": round(q([s.total for s in ok], p), 3) for p in (50, 95, 99)},
                "first_byte_p50_ms": round(q([s.first_byte for s in ok], 50), 3),
                "lag_p99_ms": round(q([s.lag for s in samples], 99), 3),
                "lag_mean_ms": round(statistics.fmean(s.lag for s in samples) * 1000, 3) if samples else 0,
            }
        )
    )


if __name__ == "__main__":
    main()
