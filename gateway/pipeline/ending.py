"""The one ending of a request: however an answer ends, :meth:`Ending.end` runs for it, once.

    completed     the tier's (or the cache's) Finished came                        200
    client gone   the client closed the stream, or left while its JSON was made    499
    tier failed   the tier failed after its answer began                           502
    timed out     the tier timed out after its answer began                        504
    refused       a stage refused the request before any tier began               its error's status

That one place does all of it: the tenant's token counter (what was produced), the ledger row (those
tokens, and the status that names the ending), the breaker of (tier, modality), the router's
observation, the result cache (complete answers only), the tier's metrics and the live view.

What was produced is counted as the events pass (:class:`Tally`).  A completed answer's tokens are
the tier's own count (its :class:`~tiers.Finished`).  An answer cut short has no such count: it is
billed one completion token per piece the tier yielded (a text or tool-call delta; each engine step
yields at most one piece per token, on both tiers, so this never bills more than was made) and the
prompt's tokens as the router estimated them (the tier had read the prompt: it had begun).

A stream reaches the ending through :meth:`Ending.watched`, the one generator its events pass between
the tier and the framing; a JSON answer, read whole while it is made, through :meth:`Ending.end`
called by the dispatcher; a request refused before any tier began, through :meth:`Ending.refused`.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import time
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass, field

import router
from gateway.accounts.quality.feedback import Outcomes
from gateway.accounts.quality.shadow import Job, Shadows
from gateway.ops.metrics import Metrics
from gateway.pipeline.admission import Slot
from gateway.pipeline.answer import Answer, Routed
from gateway.pipeline.answers import Answers
from gateway.pipeline.answers.exact import Lookup
from gateway.pipeline.plan import Plan
from gateway.pipeline.record import Call, Recorder
from gateway.pipeline.routing_service import RoutingService
from gateway.pipeline.tierset import TierSet
from tiers import (
    Event,
    EventStream,
    Finished,
    OutputRefused,
    Started,
    TextDelta,
    TierFailed,
    TierTimeout,
    TierUnavailable,
    ToolCallDelta,
    Usage,
)

# Tier errors a circuit breaker counts: the path is broken, not the request.
BREAKER_FAILURES = (TierUnavailable, TierFailed)


class How(enum.StrEnum):
    """How a request ended; the ledger's status says it (:data:`STATUS`)."""

    COMPLETED = "completed"
    CLIENT_GONE = "client gone"
    TIER_FAILED = "tier failed"
    TIMED_OUT = "timed out"
    REFUSED = "refused"


STATUS = {How.COMPLETED: 200, How.CLIENT_GONE: 499, How.TIER_FAILED: 502, How.TIMED_OUT: 504}


def how_of(exc: BaseException) -> How:
    """The ending an exception raised while an answer was on its way stands for."""
    if isinstance(exc, TierTimeout):
        return How.TIMED_OUT
    if isinstance(exc, asyncio.CancelledError | GeneratorExit):
        return How.CLIENT_GONE
    return How.TIER_FAILED


@dataclass(slots=True)
class Tally:
    """What a tier produced so far, counted as its events pass."""

    pieces: int = 0  # text and tool-call deltas: at most one per token
    first_at: float = 0.0  # when its first piece came (perf_counter)
    finished: Finished | None = None
    kept: list[Event] | None = None  # the answer's events, for the result cache (None: not stored)
    called: list[str] = field(default_factory=list)  # the tools it called, by name
    text: list[str] | None = None  # its text, when it is to be shadowed (gateway/accounts/quality/shadow.py)

    def add(self, event: Event) -> None:
        if isinstance(event, Started):
            return
        if not self.first_at:
            self.first_at = time.perf_counter()
        if isinstance(event, TextDelta | ToolCallDelta):
            self.pieces += 1
            if isinstance(event, ToolCallDelta) and event.name:
                self.called.append(event.name)
            elif self.text is not None and isinstance(event, TextDelta):
                self.text.append(event.text)
        elif isinstance(event, Finished):
            self.finished = event
        if self.kept is not None:
            self.kept.append(event)

    def usage(self, prompt_estimate: int) -> Usage:
        """The tokens to bill: the tier's own count, else what the pieces and the estimate say."""
        if self.finished is not None:
            return self.finished.usage
        return Usage(prompt_estimate, self.pieces) if self.first_at else Usage(0, 0)


@dataclass(slots=True)
class Attempt:
    """One tier's try at a request, from its dispatch: what the ending needs of it."""

    plan: Plan
    tier: str
    dispatched: float  # perf_counter
    stream: bool
    keep: Lookup | None = None  # where the answers port keeps it, when it completes (None: not kept)
    model: str = ""
    tally: Tally = field(default_factory=Tally)
    slot: Slot | None = None  # its admission slot (stage 7), released when it ends


class Ending:
    """Everything that happens when a request ends, in one place (see the module's docstring)."""

    def __init__(
        self,
        tiers: TierSet,
        metrics: Metrics,
        *,
        answers: Answers | None = None,
        routing: RoutingService | None = None,
        recorder: Recorder | None = None,
        outcomes: Outcomes | None = None,
        shadows: Shadows | None = None,
    ) -> None:
        self._tiers = tiers
        self._outcomes = outcomes
        self._shadows = shadows
        self._breakers = tiers.breakers
        self._metrics = metrics
        self._answers = answers
        self._routing = routing
        self._recorder = recorder

    def attempt(self, plan: Plan, tier: str, stream: bool, lookup: Lookup) -> Attempt:
        """``lookup``: where the answers port keeps a complete answer (none for a degraded one)."""
        keep = None if plan.degraded or lookup.key is None or self._answers is None else lookup
        tally = Tally(kept=[] if keep is not None else None)
        if self._shadows is not None and self._routing is not None:
            policy = self._routing.policy(plan.features.tenant).shadow
            if policy.enabled and self._shadows.sample(policy, plan.features.tenant):
                tally.text = []  # kept as it passes, to compare with the reference's
        return Attempt(plan, tier, time.perf_counter(), stream, keep, tally=tally)

    # -- a tier's try that did not become the answer (failover) --------------------------------

    def passed_over(self, attempt: Attempt, exc: BaseException) -> None:
        """A tier failed before its answer began: its breaker learns it, the request goes on."""
        if attempt.slot is not None:
            attempt.slot.release(completed=False)
        if isinstance(exc, BREAKER_FAILURES):
            if isinstance(exc, TierTimeout):
                self._metrics.timed_out(attempt.tier)
            self._breakers.record(attempt.tier, attempt.plan.modalities, ok=False, why=str(exc))
        else:  # a full queue, the request's own fault, or its client gone: no outcome for the breaker
            self._breakers.release(attempt.tier, attempt.plan.modalities)

    # -- the endings -----------------------------------------------------------------------------

    async def watched(
        self,
        call: Call | None,
        attempt: Attempt | None,
        answer: Answer,
        events: EventStream,
        head: Iterable[Event] = (),
    ) -> AsyncGenerator[Event, None]:
        """A streamed answer's events (``head``: those read already, then the rest), counted as they
        pass; when they end, however they end, the request ends.  A completed answer's ledger row is
        durable before its Finished goes on (so before ``data: [DONE]``)."""
        tally = attempt.tally if attempt is not None else Tally()
        how, error = How.CLIENT_GONE, None
        read = collections.deque(head)
        try:
            while True:
                try:
                    event = read.popleft() if read else await anext(events)
                except StopAsyncIteration:  # a stream that ended without saying why
                    how = How.COMPLETED
                    tally.finished = tally.finished or Finished("stop", Usage(0, 0))
                    await self.end(call, attempt, answer.routed, answer.model, how, tally)
                    yield tally.finished
                    return
                tally.add(event)
                if isinstance(event, Finished):
                    how = How.COMPLETED
                    await self.end(call, attempt, answer.routed, answer.model, how, tally)
                yield event
                if how is How.COMPLETED:
                    return
        except BaseException as exc:
            if how is not How.COMPLETED:
                how, error = how_of(exc), exc
            raise
        finally:
            if how is not How.COMPLETED:
                await self.end(call, attempt, answer.routed, answer.model, how, tally, error)
            await events.aclose()

    async def end(
        self,
        call: Call | None,
        attempt: Attempt | None,
        routed: Routed | None,
        model: str,
        how: How,
        tally: Tally,
        error: BaseException | None = None,
    ) -> None:
        """The request ended ``how``; ``attempt`` is the tier's try that answered (None: a cache hit)."""
        if call is not None:
            if call.ended:
                return
            call.ended = True
        now = time.perf_counter()
        prompt_estimate = attempt.plan.features.prompt_tokens if attempt is not None else 0
        usage = tally.usage(prompt_estimate)
        try:
            if attempt is not None:
                await self._tier_side(attempt, how, tally, usage, now, error)
                if call is not None and self._outcomes is not None:
                    self._outcome(self._outcomes, call, attempt, how, tally)
        finally:  # the ledger's side, whatever the tier's side met
            if call is not None and self._recorder is not None:
                await self._record(call, routed, model, usage, how, error)

    async def _record(
        self,
        call: Call,
        routed: Routed | None,
        model: str,
        usage: Usage,
        how: How,
        error: BaseException | None,
    ) -> None:
        status = STATUS.get(how, 500)
        message = None
        if how is not How.COMPLETED:
            message = (
                f"{how.value}: {error}" if error is not None and how is not How.CLIENT_GONE else how.value
            )
        assert self._recorder is not None
        try:
            await self._recorder.ended(
                call, routed, model, usage, status, message, durable=how is How.COMPLETED
            )
        except asyncio.CancelledError:  # cancelled again while recording: the row still goes out
            self._recorder.ended_now(call, routed, model, usage, status, message)
            raise

    async def completed(self, call: Call | None, routed: Routed, model: str, usage: Usage) -> None:
        """An answer made whole without a tier's try of its own (a cache hit, embeddings) ended."""
        tally = Tally(first_at=time.perf_counter(), finished=Finished("stop", usage))
        await self.end(call, None, routed, model, How.COMPLETED, tally)

    def refused(self, call: Call, exc: BaseException) -> None:
        """The request ended before any tier's answer began: a stage refused it (its error's
        status), or its client left (499)."""
        if call.ended:
            return
        call.ended = True
        if self._recorder is None:
            return
        if isinstance(exc, Exception):
            self._recorder.failed(call, exc)
        else:
            self._recorder.ended_now(
                call, None, "", Usage(0, 0), STATUS[How.CLIENT_GONE], How.CLIENT_GONE.value
            )

    async def _tier_side(
        self, attempt: Attempt, how: How, tally: Tally, usage: Usage, now: float, error: BaseException | None
    ) -> None:
        """The breaker, the metrics, the router's observation and the result cache."""
        name, modalities = attempt.tier, attempt.plan.modalities
        took = now - attempt.dispatched
        if attempt.slot is not None:
            attempt.slot.release(completed=how is How.COMPLETED)
        if how is How.COMPLETED:
            self._breakers.record(name, modalities, ok=True)
        elif how in (How.TIER_FAILED, How.TIMED_OUT) and isinstance(error, BREAKER_FAILURES):
            if how is How.TIMED_OUT:
                self._metrics.timed_out(name)
            self._breakers.record(name, modalities, ok=False, why=str(error))
        elif not isinstance(error, OutputRefused):  # the client left: no outcome for the breaker
            self._breakers.release(name, modalities)
        if not attempt.stream and how is How.COMPLETED:
            self._metrics.tier(name).latency.observe(took)
        self._metrics.generated(name, usage.completion_tokens, took)
        if how is not How.COMPLETED:
            return
        ttft = tally.first_at - attempt.dispatched if attempt.stream and tally.first_at else None
        self._learn(attempt, ttft, took, usage)
        if tally.kept is not None and attempt.keep is not None and self._answers is not None:
            model = attempt.model or self._tiers[name].capabilities.model
            await self._answers.keep(attempt.keep, tally.kept, model, name)

    def _outcome(self, outcomes: Outcomes, call: Call, attempt: Attempt, how: How, tally: Tally) -> None:
        """What the ending itself says of the answer's quality (gateway/accounts/quality/feedback.py): a
        completed answer is kept for labels (and may be a re-ask of the session's last one); a
        structured answer cut at max_tokens, a call to a tool not offered, or a stream its client left
        after it began is a bad label for the tier."""
        snapshot = attempt.plan.decision.snapshot
        keys = snapshot.quality_keys if snapshot is not None else None
        if keys is None:
            return
        rid, tenant, tier, request = call.request_id, call.tenant.name, attempt.tier, attempt.plan.request
        if how is How.COMPLETED:
            outcomes.answered(rid, tenant, tier, keys, call.session)
            offered = {t.function.name for t in request.tools or ()}
            if (
                tally.finished is not None
                and tally.finished.reason == "length"
                and request.format_type != "text"
            ):
                outcomes.outcome(rid, False, "cut short")
            elif any(name not in offered for name in tally.called):
                outcomes.outcome(rid, False, "no such tool")
            elif tally.text is not None and not tally.called:
                self._shadow(call, attempt, "".join(tally.text), keys)
        elif how is How.CLIENT_GONE and attempt.stream and tally.first_at:
            outcomes.answered(rid, tenant, tier, keys, None)
            outcomes.outcome(rid, False, "abandoned")

    def _shadow(self, call: Call, attempt: Attempt, answer: str, keys: router.QualityKeys) -> None:
        """Offer the answer to the shadows (gateway/accounts/quality/shadow.py), unless its tier is the
        reference."""
        assert self._shadows is not None and self._routing is not None and self._recorder is not None
        tenant, plan = call.tenant.name, attempt.plan
        policy = self._routing.policy(tenant).shadow
        views = self._tiers.views()
        reference = policy.reference or max(views, key=lambda v: v.capabilities.quality).name
        if reference == attempt.tier or reference not in {v.name for v in views}:
            return
        if not call.caller.limits.allows_tier(reference):  # a key kept off that tier: never asked there
            return
        price = self._routing.learner.prices.get(reference)
        snapshot = plan.decision.snapshot
        made = snapshot.predictions.get(reference) if snapshot is not None else None
        worst = price.estimate(plan.features, 1.0, made.total_hi if made else 0.0) if price else 0.0
        generation = plan.generation(call.request_id, None, tenant)
        structured = plan.request.format_type != "text"
        job = Job(
            call.request_id,
            tenant,
            attempt.tier,
            reference,
            generation,
            answer,
            structured,
            keys,
            worst,
            policy.threshold,
        )
        recorder, started, model = (
            self._recorder,
            time.perf_counter(),
            self._tiers[reference].capabilities.model,
        )

        async def bill(job: Job, text: str, usage: Usage) -> float:
            return recorder.shadowed(call, reference, model, usage, started)

        self._shadows.offer(job, policy.budget_usd, bill)

    def _learn(self, attempt: Attempt, ttft_s: float | None, total_s: float, usage: Usage) -> None:
        """The router learns what the tier took and the tokens it counted; its prediction's error
        goes to /metrics."""
        if self._routing is None:
            return
        decision, name = attempt.plan.decision, attempt.tier
        self._routing.observe(decision, name, ttft_s, total_s, usage.completion_tokens, usage.prompt_tokens)
        snapshot = decision.snapshot
        predicted = snapshot.predictions.get(name) if snapshot is not None else None
        if predicted is not None:
            self._metrics.predictor_error(name, predicted.total_p50, total_s, "total")
            if ttft_s is not None:
                self._metrics.predictor_error(name, predicted.ttft_p50, ttft_s, "ttft")
