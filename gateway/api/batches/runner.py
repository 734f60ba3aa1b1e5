"""Batch lines run on the capacity interactive requests leave idle, each through the same front and
the same ending as a live request.

Every gateway runs one :class:`BatchRunner`.  It claims lines only while the tiers have room (a free
service slot on some tier's admission gate and nobody waiting in any lane) and at most
``batch.concurrency`` at once, so an interactive request finds a slot as it would without the batch
(at worst behind one line a slot, never behind a queue of them).  A line is then an ordinary request
of its endpoint: its body is parsed by the endpoint's own stage 2, its caller is the key that made
the batch (read again: a key revoked since refuses the rest), and the tenant's policy, limits,
residency rules and budget apply (gateway/pipeline/front.py's ``Deferred``).  Its ledger row is tagged
``batch=<id>``, priced at ``batch.price_factor`` × the live price, and its id comes from the line's
(batch id, line number), so a line run twice after a crash is billed once.  In the dispatcher the line
waits in the slow lane, and the router drops the policy's latency objective for it (its deadline is
hours), so the cheapest tier that meets the quality floor takes it.  A line refused for the tenant's
limits or a full lane (429) is put back and the runner pauses for its Retry-After.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from gateway.accounts.batches import BatchStore, LineError, LineJob
from gateway.api import completions as legacy
from gateway.api.framing import json_body
from gateway.api.responses.controllers import Turn, response_body
from gateway.errors import GatewayError, NotFound, error_body, to_gateway_error
from gateway.pipeline.front import Deferred, Incoming
from gateway.services import Services
from gateway.wire.chat import encode

log = logging.getLogger(__name__)
PROGRESS_S = 5.0  # how often the gauges of every gateway's batches are read from the database
QUIET_POLL_S = 0.02  # how often lines waiting for the tiers to go quiet look again


class BatchRunner:
    def __init__(self, services: Services, store: BatchStore) -> None:
        self._services = services
        self._store = store
        self._settings = services.settings.batch
        self._running: dict[asyncio.Task[None], LineJob] = {}
        self._answering: set[asyncio.Task[None]] = set()  # lines not answered yet: these yield
        self._wake = asyncio.Event()
        self._paused_until = 0.0
        self._quiet_since = 0.0  # when an interactive request was last seen in flight
        self._more = False  # the last claim found as many lines as it asked for: likely more
        self._writes: set[asyncio.Future[None]] = set()  # lines going back to pending
        metrics = services.metrics
        self._outcomes = {o: metrics.batch_lines.labels(o) for o in ("ok", "error", "retried", "yielded")}
        self._gates = list(services.tiers.gates.by_tier.values())
        for gate in self._gates:
            gate.on_interactive = self._yield

    def room(self) -> int:
        """Lines this gateway may start now: none while any interactive request holds or waits for a
        slot on any tier (every tier here shares the machine's cores) or did within ``batch.quiet_s``,
        else up to the concurrency."""
        now = time.monotonic()
        if any(g.interactive > 0 for g in self._gates):
            self._quiet_since = now
            return 0
        if now < self._paused_until or now - self._quiet_since < self._settings.quiet_s:
            return 0
        return max(0, self._settings.concurrency - len(self._running))

    def _yield(self) -> None:
        """An interactive request asks a tier for a slot: the lines not answered yet stop now (each
        goes back to pending, unbilled, and runs again once the tiers are quiet)."""
        self._quiet_since = time.monotonic()
        for task in self._answering:
            task.cancel()

    async def run(self) -> None:
        moved = await asyncio.to_thread(self._store.take_back)
        if moved:
            log.info("batches: %d lines left running by the last start are pending again", moved)
        probe = progress = 0.0  # when the database was last asked for lines, and for the gauges
        while True:
            try:
                now = time.monotonic()
                if now - probe >= self._settings.poll_s:
                    probe = now
                    await self._finalize()
                if self._more and (n := self.room()) > 0:
                    await self._claim(n)
                if now - progress >= PROGRESS_S:
                    progress = now
                    await self._progress()
            except Exception:  # the database away, say: the lines wait, the runner tries again
                log.exception("batches: a round of the runner failed")
                self._more = False
            self._services.metrics.batch_lines_running.set(len(self._running))
            self._wake.clear()
            # Lines waiting for the tiers to go quiet: look again soon (no database read); else
            # at the next line's end, or the next probe.
            wait = QUIET_POLL_S if self._more and self.room() == 0 else self._settings.poll_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait)

    async def _finalize(self) -> None:
        for batch_id in await asyncio.to_thread(self._store.ready_to_end):
            if await asyncio.to_thread(self._store.finalize, batch_id):
                log.info("batches: %s finalized", batch_id)
        self._more = True  # look for lines at this probe

    async def _claim(self, n: int) -> None:
        jobs = await asyncio.to_thread(self._store.claim, n)
        self._more = len(jobs) == n
        for job in jobs:
            task = asyncio.create_task(self._line(job), name=f"batch line {job.request_id}")
            self._running[task] = job
            self._answering.add(task)
            task.add_done_callback(self._ended)

    async def _progress(self) -> None:
        active = await asyncio.to_thread(self._store.active)
        self._services.metrics.batches_active.set(len(active))
        left = sum(b.total - b.completed - b.failed for b in active if b.status == "in_progress")
        self._services.metrics.batch_lines_left.set(left)

    def _ended(self, task: asyncio.Task[None]) -> None:
        job = self._running.pop(task, None)
        self._answering.discard(task)
        self._wake.set()
        if task.cancelled() and job is not None:
            # An interactive request came, or a stop: whether the line was running, was claimed but
            # not yet started, or was having its row written, it is pending again now, not left
            # claimed until its lease ends (put_back moves only a running line, so a line already
            # finished stays finished).  Unbilled: a cancelled line leaves no ledger row.
            self._outcomes["yielded"].inc()
            self._more = True
            back = asyncio.ensure_future(asyncio.to_thread(self._store.put_back, job))
            self._writes.add(back)
            back.add_done_callback(self._writes.discard)

    async def _line(self, job: LineJob) -> None:
        try:  # cancelled (an interactive request came, or a stop): _ended puts the line back
            answered: bytes | Exception = await self._answer(job)
        except Exception as exc:
            answered = exc
        if (task := asyncio.current_task()) is not None:
            self._answering.discard(task)
        status, error = 200, None
        if isinstance(answered, bytes):
            body = answered
        else:
            failure = to_gateway_error(answered)
            if failure.status == 429:  # the tenant's limits or a full lane: later, as it was told
                self._paused_until = max(self._paused_until, time.monotonic() + _retry_after(failure))
                self._outcomes["retried"].inc()
                await asyncio.to_thread(self._store.put_back, job)
                return
            status, body = failure.status, encode(error_body(failure))
            error = LineError(code=failure.code or failure.type, message=failure.message, line=job.line)
        self._outcomes["ok" if 200 <= status < 300 else "error"].inc()
        await asyncio.to_thread(self._store.finish, job, status, body, error)

    async def _answer(self, job: LineJob) -> bytes:
        """The line's answer: the endpoint's JSON body (its refusal raised, as for a live request)."""
        services = self._services
        caller = await services.auth.caller_of_key(job.key_id)
        incoming = Incoming(
            {"x-tiergate-tags": f"batch={job.batch_id}"},
            _given(job.body),
            job.request_id,
            deferred=Deferred(caller, self._settings.price_factor),
        )
        return await self._run(job.endpoint, incoming)

    async def _run(self, endpoint: str, incoming: Incoming) -> bytes:
        """One request of ``endpoint``, as its controller runs it, answered whole."""
        services = self._services
        if endpoint == "/v1/chat/completions":
            return await json_body(await services.pipeline.run(incoming))
        if endpoint == "/v1/responses":
            turn = Turn(services.responses)
            one = dataclasses.replace(incoming, parse=turn.parse, endpoint="responses")
            return await response_body(turn, await services.pipeline.run(one))
        if endpoint == "/v1/completions":
            asked, answers, _ = await legacy.start(services.pipeline, services.auth, incoming)
            return await legacy.json_body(answers, asked.prompts, asked.n, asked.echo, incoming.request_id)
        if services.embeddings is None:
            raise NotFound("/v1/embeddings is off here (embedding.enabled = false)")
        one = dataclasses.replace(incoming, endpoint="embeddings")
        return (await services.embeddings.run(one)).body

    async def aclose(self) -> None:
        """Stop: lines still running go back to pending (another gateway, or the next start, runs
        them; none was billed: a cancelled batch line leaves no ledger row)."""
        for gate in self._gates:
            gate.on_interactive = None
        for task in list(self._running):
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)
        await asyncio.gather(*self._writes, return_exceptions=True)


def _retry_after(error: GatewayError) -> float:
    """The seconds a 429 said to wait (its Retry-After), at least one."""
    try:
        return max(1.0, float(error.headers().get("Retry-After", "1")))
    except ValueError:
        return 1.0


def _given(body: bytes) -> Callable[[], Awaitable[bytes]]:
    async def read() -> bytes:
        return body

    return read
