"""Stages 7–8, admit and dispatch: the plan's tiers in order, each behind its admission gate (the
tier is wrapped by gateway/pipeline/admission.py) and its circuit breakers, until one answers.

A tier that fails before its answer begins is passed over for the next one (failover).  A JSON
answer is read whole here, so it can fail over until its last event (its client has seen nothing
yet); a stream is handed on once its first piece is ready.  Every call is charged to the breaker
of (tier, modality): timeouts, 5xx and unreachable servers count as failures; a client's own 4xx
and a full queue do not.  When the answer finishes, the router learns what it took and the result
cache stores it, then the semantic cache indexes it (before its last event goes out, so a repeat right
after finds it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncGenerator

from gateway.errors import to_gateway_error
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.answer import Answer, Routed, chain, predicted_header, whole
from gateway.pipeline.caching import AnswerCache, Lookup, Pending, answer_of
from gateway.pipeline.plan import Plan
from gateway.pipeline.routing import RoutingService
from gateway.pipeline.semantic import SemanticCache
from gateway.pipeline.tierset import TierSet
from gateway.residency import Redaction, restored
from tiers import (
    Event,
    EventStream,
    Finished,
    Generation,
    OutputRefused,
    Started,
    TierFailed,
    TierOverloaded,
    TierTimeout,
    TierUnavailable,
    Usage,
)

# Tier errors a circuit breaker counts: the path is broken, not the request.
_BREAKER_FAILURES = (TierUnavailable, TierFailed)


class Dispatcher:
    def __init__(
        self,
        tiers: TierSet,
        metrics: Metrics,
        tracing: Tracing,
        *,
        answers: AnswerCache | None = None,
        semantic: SemanticCache | None = None,
        routing: RoutingService | None = None,
    ) -> None:
        self._tiers = tiers
        self._breakers = tiers.breakers
        self._metrics = metrics
        self._tracing = tracing
        self._answers = answers
        self._semantic = semantic
        self._routing = routing

    async def dispatch(self, plan: Plan, gen: Generation, lookup: Lookup, started: float) -> Answer:
        """The first tier of the plan that begins an answer; 503/429/502 when none does."""
        key = None if plan.degraded else lookup.key
        pending = None if plan.degraded else lookup.semantic
        last: Exception | None = None
        for name in plan.order:
            if not self._breakers.acquire(name, plan.modalities):
                last = TierUnavailable(name, "its circuit breaker is open")
                continue
            dispatched = time.perf_counter()
            generated = self._generate(plan, name, gen)
            events = self._observed(plan, name, generated, (key, pending), dispatched, gen.stream)
            try:
                with self._tracing.span(f"tier.{name}"):
                    begun, head = await (_opening(events) if gen.stream else _whole(events))
            except TierUnavailable as exc:
                await events.aclose()
                self._metrics.failovers.labels(name).inc()
                last = exc
                continue
            except TierOverloaded as exc:  # its queue is full: the next tier in the fallback order
                await events.aclose()
                last = exc
                continue
            except BaseException:
                await events.aclose()
                raise
            if gen.stream:
                self._metrics.tier(name).ttft.observe(time.perf_counter() - dispatched)
            routed = Routed(
                name,
                # The header's text, rendered from the typed reason, and the residency rules that fired.
                str(plan.reason(name, last)) + plan.residency.note,
                lookup.status,
                plan.degraded,
                time.perf_counter() - started,
                lookup.seconds,
                begun.instance,
                predicted_header(plan.decision, name),
                embed_s=lookup.embed_s,
            )
            model = begun.model or self._tiers[name].capabilities.model  # an edge version swapped meanwhile
            completion_id = f"chatcmpl-{gen.request_id}"
            if gen.stream:
                return Answer(routed, model, chain(head, events), completion_id)
            await events.aclose()  # read whole: nothing more will come
            return whole(routed, model, head, completion_id)
        assert last is not None
        raise to_gateway_error(last) from last

    def _generate(self, plan: Plan, name: str, gen: Generation) -> EventStream:
        """The tier's events; a remote tier gets the text redact rules matched as placeholders,
        and the answer has the originals put back."""
        if not plan.residency.redact or name not in self._tiers.remote:
            return self._tiers[name].generate(gen)
        redaction = Redaction()
        redacted = dataclasses.replace(gen, messages=redaction.messages(gen.messages, plan.residency.redact))
        return restored(self._tiers[name].generate(redacted), redaction)

    def _learn(self, plan: Plan, name: str, ttft_s: float | None, total_s: float, usage: Usage) -> None:
        """The router learns what ``name`` took, and the tokens it counted; its prediction's error
        goes to /metrics."""
        if self._routing is None:
            return
        self._routing.observe(
            plan.decision, name, ttft_s, total_s, usage.completion_tokens, usage.prompt_tokens
        )
        snapshot = plan.decision.snapshot
        predicted = snapshot.predictions.get(name) if snapshot is not None else None
        if predicted is not None:
            self._metrics.predictor_error(name, predicted.total_p50, total_s, "total")
            if ttft_s is not None:
                self._metrics.predictor_error(name, predicted.ttft_p50, ttft_s, "ttft")

    async def _observed(
        self,
        plan: Plan,
        name: str,
        events: EventStream,
        stores: tuple[str | None, Pending | None],
        dispatched: float,
        stream: bool,
    ) -> AsyncGenerator[Event, None]:
        """Pass a tier's events through, charging the outcome to its breakers, and when it finishes:
        metrics, the router's observation and the result cache."""
        modalities = plan.modalities
        key, pending = stores  # the exact cache's key; what the semantic cache indexes after
        produced: list[Event] = []  # what the cache keeps
        model = ""
        settled = False
        first_at = 0.0
        try:
            async for event in events:
                if not first_at:
                    first_at = time.perf_counter()
                if isinstance(event, Started):
                    model = event.model
                    yield event
                    continue
                if key is not None:
                    produced.append(event)
                if isinstance(event, Finished):
                    settled = True
                    took = time.perf_counter() - dispatched
                    self._breakers.record(name, modalities, ok=True)
                    if not stream:
                        self._metrics.tier(name).latency.observe(took)
                    self._metrics.generated(name, event.usage.completion_tokens, took)
                    self._learn(plan, name, first_at - dispatched if stream else None, took, event.usage)
                    if key is not None and self._answers is not None:
                        model = model or self._tiers[name].capabilities.model
                        await self._answers.store(key, answer_of(produced, model, name))
                        if pending is not None and self._semantic is not None:
                            await self._semantic.add(pending)
                yield event
        except OutputRefused:  # the model misbehaved, the path works: not a breaker failure
            raise
        except _BREAKER_FAILURES as exc:
            settled = True
            if isinstance(exc, TierTimeout):
                self._metrics.timed_out(name)
            self._breakers.record(name, modalities, ok=False, why=str(exc))
            raise
        finally:
            if not settled:
                self._breakers.release(name, modalities)
            with contextlib.suppress(Exception):
                await events.aclose()


async def _opening(events: AsyncGenerator[Event, None]) -> tuple[Started, list[Event]]:
    """A tier's :class:`Started` and the event that comes with it (the answer's first piece)."""
    first = await anext(events)
    if not isinstance(first, Started):
        return Started(), [first]
    return first, [await anext(events)]


async def _whole(events: AsyncGenerator[Event, None]) -> tuple[Started, list[Event]]:
    """A tier's :class:`Started` and every event after it, up to and including :class:`Finished`."""
    begun = Started()
    read: list[Event] = []
    async for event in events:
        if isinstance(event, Started):
            begun = event
            continue
        read.append(event)
        if isinstance(event, Finished):
            break
    return begun, read
