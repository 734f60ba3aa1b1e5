"""Stages 7–8, admit and dispatch: the plan's tiers in order, each behind its circuit breakers and
its admission gate (a slot taken here, gateway/pipeline/admission.py), until one answers.

A tier that fails before its answer begins is passed over for the next one (failover).  A JSON
answer is read whole here, so it can fail over until its last event (its client has seen nothing
yet); a stream is handed on once its first piece is ready.  Every call is charged to the breaker
of (tier, modality): timeouts, 5xx and unreachable servers count as failures; a client's own 4xx
and a full queue do not; a hosted provider's refusal of the tier's key opens it at once.  How the
answer ends (completed, its client gone, the tier failed) is the ending's (gateway/pipeline/ending.py):
a JSON answer's runs here, a stream's as its events end.
"""

from __future__ import annotations

import dataclasses
import time

import router
from gateway.errors import to_gateway_error
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.answer import Answer, Routed, predicted_header, whole
from gateway.pipeline.answers.exact import Lookup
from gateway.pipeline.ending import Ending, How, Tally, how_of
from gateway.pipeline.plan import Plan
from gateway.pipeline.record import Call
from gateway.pipeline.tierset import TierSet
from gateway.residency import Redaction, restored
from tiers import (
    Event,
    EventStream,
    Finished,
    Generation,
    KeyRefused,
    Modality,
    Started,
    TierOverloaded,
    TierUnavailable,
    Usage,
)


class Dispatcher:
    def __init__(self, tiers: TierSet, metrics: Metrics, tracing: Tracing, ending: Ending) -> None:
        self._tiers = tiers
        self._breakers = tiers.breakers
        self._metrics = metrics
        self._tracing = tracing
        self._ending = ending

    async def dispatch(
        self, plan: Plan, gen: Generation, lookup: Lookup, started: float, call: Call | None = None
    ) -> Answer:
        """The first tier of the plan that begins an answer; 503/429/502 when none does."""
        last: Exception | None = None
        for name in plan.order:
            if not self._breakers.acquire(name, plan.modalities):
                last = TierUnavailable(name, "its circuit breaker is open")
                continue
            attempt = self._ending.attempt(plan, name, gen.stream, lookup)
            events: EventStream | None = None
            try:
                attempt.slot = await self._tiers.gates.take(name, gen.cost, gen.tenant)  # 7 admit
                events = self._generate(plan, name, gen)  # 8 dispatch
                with self._tracing.span(f"tier.{name}"):
                    begun, head = await (
                        _opening(events, attempt.tally) if gen.stream else _whole(events, attempt.tally)
                    )
                assert events is not None
            except (TierUnavailable, TierOverloaded) as exc:  # the next tier in the fallback order
                await _closed(events)
                self._ending.passed_over(attempt, exc)
                if isinstance(exc, KeyRefused):  # no call will do until an operator acts: open at once
                    for modality in router.attributed(plan.modalities) | {Modality.TEXT}:
                        self._breakers.apply(name, modality, router.BreakerState.OPEN, why=str(exc))
                if isinstance(exc, TierUnavailable):
                    self._metrics.failovers.labels(name).inc()
                last = exc
                continue
            except BaseException as exc:
                await _closed(events)
                if attempt.tally.first_at or not isinstance(exc, Exception):  # begun, or its client left
                    routed = self._routed(plan, name, last, lookup, started, Started())
                    model = self._tiers[name].capabilities.model
                    await self._ending.end(call, attempt, routed, model, how_of(exc), attempt.tally, exc)
                else:
                    self._ending.passed_over(attempt, exc)
                raise
            attempt.model = begun.model or self._tiers[name].capabilities.model  # a swapped edge version
            routed = self._routed(plan, name, last, lookup, started, begun)
            completion_id = f"chatcmpl-{gen.request_id}"
            if gen.stream:
                self._metrics.tier(name).ttft.observe(attempt.tally.first_at - attempt.dispatched)
                answer = Answer(routed, attempt.model, events, completion_id)  # type: ignore[arg-type]
                watched = self._ending.watched(call, attempt, answer, events, head)
                return dataclasses.replace(answer, events=watched)
            await events.aclose()  # read whole: nothing more will come
            tally = attempt.tally
            if tally.finished is None:  # an answer that ended without saying why
                tally.finished = Finished("stop", Usage(0, 0))
                head.append(tally.finished)
            await self._ending.end(call, attempt, routed, attempt.model, How.COMPLETED, tally)
            return whole(routed, attempt.model, head, completion_id)
        assert last is not None
        raise to_gateway_error(last) from last

    def _routed(
        self, plan: Plan, name: str, last: Exception | None, lookup: Lookup, started: float, begun: Started
    ) -> Routed:
        return Routed(
            name,
            # The header's text, rendered from the typed reason, and the residency rules that fired.
            str(plan.reason(name, last)) + plan.note + plan.residency.note,
            lookup.status,
            plan.degraded,
            time.perf_counter() - started,
            lookup.seconds,
            begun.instance,
            predicted_header(plan.decision, name),
            embed_s=lookup.embed_s,
        )

    def _generate(self, plan: Plan, name: str, gen: Generation) -> EventStream:
        """The tier's events; a remote tier gets the text redact rules matched as placeholders,
        and the answer has the originals put back."""
        if not plan.residency.redact or name not in self._tiers.remote:
            return self._tiers[name].generate(gen)
        redaction = Redaction()
        redacted = dataclasses.replace(gen, messages=redaction.messages(gen.messages, plan.residency.redact))
        return restored(self._tiers[name].generate(redacted), redaction)


async def _closed(events: EventStream | None) -> None:
    if events is not None:
        await events.aclose()


async def _opening(events: EventStream, tally: Tally) -> tuple[Started, list[Event]]:
    """A tier's :class:`Started` and the event that comes with it (the answer's first piece)."""
    first = await anext(events)
    if not isinstance(first, Started):
        tally.first_at = time.perf_counter()
        return Started(), [first]
    head = [await anext(events)]
    tally.first_at = time.perf_counter()
    return first, head


async def _whole(events: EventStream, tally: Tally) -> tuple[Started, list[Event]]:
    """A tier's :class:`Started` and every event after it, up to and including :class:`Finished`,
    counted as they come (a client that leaves meanwhile is billed what was made)."""
    begun = Started()
    read: list[Event] = []
    async for event in events:
        if isinstance(event, Started):
            begun = event
            continue
        tally.add(event)
        read.append(event)
        if isinstance(event, Finished):
            break
    return begun, read
