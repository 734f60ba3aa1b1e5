"""The chat service: answer from the result cache, or route a validated request to a tier
(degrading media no tier can take now), fail over before the first byte.

Controllers call :meth:`ChatService.complete` or :meth:`ChatService.stream` with a
:class:`RequestContext` (the tenant, the client's cache directives); both return the
tier that served, why, the cache status and what was degraded, so the controller
can put them in the response headers.  Every tier call is charged to the circuit
breaker of (tier, modality): timeouts, 5xx and unreachable servers count as
failures, a client's own 4xx and a full queue do not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

import router
from gateway.accounts.tenants import DEFAULT_TENANT
from gateway.api.protocol import (
    AudioPart,
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    FramesPart,
    ImagePart,
    ModelCard,
    ModelList,
    ResponseMessage,
    TextPart,
    TiergateInfo,
    UsageBody,
    VideoPart,
)
from gateway.api.sse import ChunkWriter
from gateway.errors import ModalityUnavailable, ModelNotFound, to_gateway_error
from gateway.media import engine_messages
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline import degrade
from gateway.pipeline.caching import AnswerCache, CacheStatus, Lookup, answer_of, completion_of, replay
from tiers import (
    Completion,
    Event,
    EventStream,
    Finished,
    Generation,
    Modality,
    Started,
    TextDelta,
    Tier,
    TierFailed,
    TierOverloaded,
    TierTimeout,
    TierUnavailable,
    Usage,
    collect,
)

if TYPE_CHECKING:
    from gateway.pipeline.routing import RoutingService

AUTO_MODEL = "tiergate-auto"
_PART_MODALITY = {
    ImagePart: Modality.IMAGE,
    AudioPart: Modality.AUDIO,
    VideoPart: Modality.VIDEO,
    FramesPart: Modality.VIDEO,
}
# Called when a stream ends: (when its first event came, its usage); the router learns from it.
Learn = Callable[[float, Usage | None], None]
# Tier errors a circuit breaker counts: the path is broken, not the request.
_BREAKER_FAILURES = (TierUnavailable, TierFailed)


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who a request is for and what it asked of the gateway itself."""

    tenant: str = DEFAULT_TENANT
    cache_control: str = ""  # the request's Cache-Control header
    use_cache: bool = True  # a tenant policy may turn the result cache off
    # None: the gateway's setting (degradation.fail_instead); a tenant policy may say otherwise.
    fail_instead_of_degrade: bool | None = None
    session_id: str | None = None  # the client's X-Session-ID: its conversation, for replica affinity
    media: router.MediaSummary = router.NO_MEDIA  # what media preprocessing measured


@dataclass(frozen=True, slots=True)
class Routed:
    tier: str
    reason: str
    cache: CacheStatus = CacheStatus.BYPASS
    degraded: tuple[str, ...] = ()
    # Time spent in the gateway before the answer (or its first byte) was ready, and in the cache.
    server_s: float = 0.0
    cache_s: float = 0.0
    instance: str = ""  # the replica or engine instance that served it
    # The router's median predictions for the tier that served, e.g. "ttft=80ms, total=900ms,
    # tokens=40, per_token=20.0ms" (the answer's expected length, and the total's seconds per token).
    predicted: str = ""


@dataclass(frozen=True, slots=True)
class _Plan:
    """A routed request: what will be sent (maybe degraded), where, and what it carries."""

    request: ChatCompletionRequest
    decision: router.Decision
    modalities: frozenset[Modality]
    degraded: tuple[str, ...]
    features: router.Features


@dataclass(slots=True)
class StreamOutcome:
    """Filled in while a stream runs: the model answering and, once it ends, its usage."""

    model: str = ""
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class StreamStart:
    routed: Routed
    events: AsyncGenerator[bytes, None]
    outcome: StreamOutcome = field(default_factory=StreamOutcome)


def features_of(
    request: ChatCompletionRequest, media: router.MediaSummary = router.NO_MEDIA, tenant: str = ""
) -> router.Features:
    chars = 0
    modalities = {Modality.TEXT}
    last_user = ""
    for message in request.messages:
        if isinstance(message.content, str):
            chars += len(message.content)
            text = message.content
        elif message.content:
            text = ""
            for part in message.content:
                if isinstance(part, TextPart):
                    chars += len(part.text)
                    text += part.text
                else:
                    modalities.add(_PART_MODALITY[type(part)])
        else:
            text = ""
        if message.role == "user":
            last_user = text
    return router.Features.estimate(
        text_chars=chars,
        turns=len(request.messages),
        max_tokens=request.output_limit,
        modalities=frozenset(modalities),
        stream=request.stream,
        media=media,
        tenant=tenant,
        hour=time.gmtime().tm_hour,
        text=last_user,
    )


# Expected output when the client sets no max_tokens, for cost estimates only.
DEFAULT_OUTPUT_TOKENS = 256
# A prompt token costs about a tenth of a generated one: prefill is batched, decoding is token by
# token (SmolLM2 on this CPU: ~1,000 prompt tokens/s against ~30 generated tokens/s per sequence).
PROMPT_TOKEN_COST = 0.1


def conversation_key(request: ChatCompletionRequest, session_id: str | None) -> str:
    """The client's session id, else a hash of the conversation's opening (system + first user turn),
    which every later turn of the same conversation repeats."""
    if session_id:
        return session_id
    opening = msgspec.json.encode(request.messages[:2])
    return hashlib.blake2b(opening, digest_size=8).hexdigest()


def reason_class(model: str, decision: router.Decision) -> tuple[str, str]:
    """(strategy, reason class) of a decision, bounded labels for metrics."""
    if model != AUTO_MODEL:
        return "pinned", "pinned"
    detail = decision.detail
    strategy = detail.strategy if detail is not None and detail.strategy else "rule"
    reason = decision.reason
    for marker, klass in _REASON_CLASSES:
        if marker in reason:
            return strategy, klass
    return strategy, "size" if strategy == "rule" else "policy"


# The first marker found in a decision's reason names its class (see router/_strategies.py).
_REASON_CLASSES = (
    ("breaker is open", "breaker_open"),
    (" is starting", "tier_unavailable"),
    (" is down", "tier_unavailable"),
    (" is disabled", "tier_unavailable"),
    ("not configured", "tier_unavailable"),
    ("context is", "tier_unavailable"),
    ("cannot take it", "tier_unavailable"),
    ("exploring", "exploration"),
    ("budget spent", "budget"),
    ("round-robin", "round_robin"),
    ("most likely to meet", "slo_unmet"),
    ("slo", "slo"),
)


def generation_of(plan: _Plan, request_id: str, session_id: str | None, tenant: str) -> Generation:
    request, features = plan.request, plan.features
    return Generation(
        messages=engine_messages(msgspec.to_builtins(request.messages)),
        max_tokens=request.output_limit,
        temperature=request.temperature,
        top_p=request.top_p,
        stop=request.stop_list,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        request_id=request_id,
        cost=PROMPT_TOKEN_COST * features.prompt_tokens + (features.max_tokens or DEFAULT_OUTPUT_TOKENS),
        affinity=conversation_key(request, session_id),
        tenant=tenant,
        stream=request.stream,
    )


class ChatService:
    def __init__(
        self,
        tiers: Mapping[str, Tier],
        rule: router.AutoRule,
        metrics: Metrics,
        *,
        answers: AnswerCache | None = None,
        breakers: router.BreakerBoard | None = None,
        fail_instead_of_degrade: bool = False,
        tracing: Tracing | None = None,
        routing: RoutingService | None = None,
    ) -> None:
        self._tiers = dict(tiers)
        self._routing = routing
        self._rule = rule
        self._metrics = metrics
        self._tracing = tracing or Tracing()
        self._answers = answers
        self._breakers = breakers or router.BreakerBoard(router.BreakerConfig(enabled=False))
        self._fail_instead_of_degrade = fail_instead_of_degrade
        self._created = int(time.time())

    @property
    def metrics(self) -> Metrics:
        return self._metrics

    @property
    def tracing(self) -> Tracing:
        return self._tracing

    @property
    def model_names(self) -> list[str]:
        return [AUTO_MODEL, *self._tiers]

    def models(self) -> ModelList:
        return ModelList([ModelCard(name, self._created) for name in self.model_names])

    def tier_states(self) -> list[dict[str, Any]]:
        return [tier.state().as_dict() for tier in self._tiers.values()]

    def breaker_states(self) -> list[dict[str, str]]:
        """Every circuit breaker that has seen a call: tier, modality, state, last failure."""
        return [b.as_dict() for b in self._breakers.snapshot()]

    async def aclose(self) -> None:
        if self._answers is not None:
            await self._answers.aclose()

    def _check_model(self, request: ChatCompletionRequest) -> None:
        if request.model not in self.model_names:
            raise ModelNotFound(
                f"the model {request.model!r} does not exist; use one of: {', '.join(self.model_names)}",
                param="model",
            )

    async def _lookup(self, request: ChatCompletionRequest, ctx: RequestContext) -> Lookup:
        if self._answers is None or not ctx.use_cache:
            return Lookup(CacheStatus.BYPASS)
        models = ",".join(f"{n}={t.capabilities.model}" for n, t in self._tiers.items())
        with self._tracing.span("cache.lookup") as span:
            lookup = await self._answers.lookup(request, ctx.tenant, ctx.cache_control, models)
            if span is not None:
                span.set_attribute("tiergate.cache", lookup.status.value)
        return lookup

    def _route(self, request: ChatCompletionRequest, ctx: RequestContext) -> _Plan:
        views = [
            router.TierView(n, t.capabilities, t.state(), self._breakers.open_modalities(n))
            for n, t in self._tiers.items()
        ]
        features = features_of(request, ctx.media, ctx.tenant)
        lost = router.to_degrade(request.model, views, features)
        degraded: tuple[str, ...] = ()
        if lost:
            names = ", ".join(sorted(m.value for m in lost))
            fail = ctx.fail_instead_of_degrade
            if self._fail_instead_of_degrade if fail is None else fail:
                raise ModalityUnavailable(
                    f"the {names} path is failing on every tier that accepts it (circuit breaker open) "
                    "and this gateway is set to fail instead of serving the request text-only; retry later"
                )
            request = degrade.without(request, lost)
            features = features_of(request, degrade.summary_without(ctx.media, lost), ctx.tenant)
            degraded = tuple(sorted(m.value for m in lost))
            for m in lost:
                self._metrics.degraded.labels(m.value).inc()
        try:
            with self._tracing.span("route"):
                if self._routing is not None:
                    decision = self._routing.decide(request.model, views, features)
                else:
                    decision = router.decide(request.model, self._rule, views, features)
        except (router.NoTierAvailable, router.BudgetExhausted) as exc:
            raise to_gateway_error(exc) from exc
        strategy, klass = reason_class(request.model, decision)
        self._metrics.route_decided(strategy, decision.tier, klass)
        if degraded:
            reason = f"{decision.reason}; {', '.join(degraded)} removed: breaker open"
            decision = dataclasses.replace(decision, reason=reason)
        return _Plan(request, decision, features.modalities, degraded, features)

    async def complete(
        self, request: ChatCompletionRequest, request_id: str, ctx: RequestContext | None = None
    ) -> tuple[Routed, ChatCompletion]:
        started = time.perf_counter()
        ctx = ctx or RequestContext()
        self._check_model(request)
        lookup = await self._lookup(request, ctx)
        if lookup.answer is not None:
            answer = lookup.answer
            routed = self._routed(answer.tier, "cache hit", lookup, started)
            return routed, self._body(request_id, completion_of(answer), ())
        plan = self._route(request, ctx)
        gen = generation_of(plan, request_id, ctx.session_id, ctx.tenant)
        last: Exception | None = None
        for name in (plan.decision.tier, *plan.decision.fallbacks):
            if not self._breakers.acquire(name, plan.modalities):
                last = TierUnavailable(name, "its circuit breaker is open")
                continue
            dispatched = time.perf_counter()
            try:
                with self._tracing.span(f"tier.{name}"):
                    result = await collect(self._tiers[name].generate(gen))
            except _BREAKER_FAILURES as exc:
                if isinstance(exc, TierTimeout):
                    self._metrics.timed_out(name)
                self._breakers.record(name, plan.modalities, ok=False, why=str(exc))
                if not isinstance(exc, TierUnavailable):
                    raise
                self._metrics.failovers.labels(name).inc()
                last = exc
                continue
            except TierOverloaded as exc:  # its queue is full: the next tier in the fallback order
                self._breakers.release(name, plan.modalities)
                last = exc
                continue
            except BaseException:
                self._breakers.release(name, plan.modalities)
                raise
            self._breakers.record(name, plan.modalities, ok=True)
            took = time.perf_counter() - dispatched
            self._metrics.tier(name).latency.observe(took)
            self._metrics.generated(name, result.usage.completion_tokens, took)
            self._learn(plan, name, None, took, result.usage)
            if lookup.key is not None and self._answers is not None and not plan.degraded:
                await self._answers.store(lookup.key, answer_of(result, [result.text], name))
            reason = plan.decision.reason if name == plan.decision.tier else f"{name}: {last}, failed over"
            routed = self._routed(name, reason, lookup, started, plan.degraded, result.instance, plan, name)
            return routed, self._body(request_id, result, plan.degraded)
        assert last is not None
        raise to_gateway_error(last) from last

    async def stream(
        self, request: ChatCompletionRequest, request_id: str, ctx: RequestContext | None = None
    ) -> StreamStart:
        """Start streaming: the answer's first event is awaited here, so failures before it can fail
        over or become a proper HTTP error.  A cached answer is replayed as the same pieces."""
        started = time.perf_counter()
        ctx = ctx or RequestContext()
        self._check_model(request)
        lookup = await self._lookup(request, ctx)
        if lookup.answer is not None:
            answer = lookup.answer
            writer = ChunkWriter(
                f"chatcmpl-{request_id}", int(time.time()), answer.model, include_usage=request.include_usage
            )
            outcome = StreamOutcome(answer.model)
            replayed = _usage_into(outcome, replay(answer))
            first = await anext(replayed)
            routed = self._routed(answer.tier, "cache hit", lookup, started)
            return StreamStart(routed, writer.events(first, replayed), outcome)
        plan = self._route(request, ctx)
        gen = generation_of(plan, request_id, ctx.session_id, ctx.tenant)
        key = None if plan.degraded else lookup.key
        last: Exception | None = None
        for name in (plan.decision.tier, *plan.decision.fallbacks):
            tier = self._tiers[name]
            if not self._breakers.acquire(name, plan.modalities):
                last = TierUnavailable(name, "its circuit breaker is open")
                continue
            dispatched = time.perf_counter()
            learn = self._learner(plan, name, dispatched)
            events = self._observed(name, plan.modalities, tier.generate(gen), key, dispatched, learn)
            try:
                with self._tracing.span(f"tier.{name}"):
                    begun, first = await _opening(events)
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
            self._metrics.tier(name).ttft.observe(time.perf_counter() - dispatched)
            model = begun.model or tier.capabilities.model  # an edge version swapped meanwhile
            writer = ChunkWriter(
                f"chatcmpl-{request_id}",
                int(time.time()),
                model,
                include_usage=request.include_usage,
                info=TiergateInfo(degraded=list(plan.degraded)) if plan.degraded else msgspec.UNSET,
            )
            reason = plan.decision.reason if name == plan.decision.tier else f"{name}: {last}, failed over"
            routed = self._routed(name, reason, lookup, started, plan.degraded, begun.instance, plan, name)
            outcome = StreamOutcome(model, first.usage if isinstance(first, Finished) else None)
            chunks = writer.events(first, _usage_into(outcome, events))
            return StreamStart(routed, _closing(chunks, events), outcome)
        assert last is not None
        raise to_gateway_error(last) from last

    def _learn(
        self, plan: _Plan, name: str, ttft_s: float | None, total_s: float, usage: Usage | None
    ) -> None:
        """The router learns what ``name`` took, and the tokens it counted; its prediction's error
        goes to /metrics."""
        if self._routing is None:
            return
        completion, prompt = (usage.completion_tokens, usage.prompt_tokens) if usage else (None, None)
        self._routing.observe(plan.decision, name, ttft_s, total_s, completion, prompt)
        detail = plan.decision.detail
        predicted = detail.predictions.get(name) if detail is not None else None
        if predicted is not None:
            self._metrics.predictor_error(name, predicted.total_p50, total_s, "total")
            if ttft_s is not None:
                self._metrics.predictor_error(name, predicted.ttft_p50, ttft_s, "ttft")

    def _learner(self, plan: _Plan, name: str, dispatched: float) -> Learn | None:
        """What to call when a stream from ``name`` finishes (with when its first event came and
        its usage): the router learns its TTFT and total time."""
        if self._routing is None:
            return None

        def finished(first_at: float, usage: Usage | None) -> None:
            self._learn(plan, name, first_at - dispatched, time.perf_counter() - dispatched, usage)

        return finished

    async def _observed(
        self,
        name: str,
        modalities: frozenset[Modality],
        events: EventStream,
        key: str | None,
        dispatched: float,
        learn: Learn | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Pass a tier's events through, charging the outcome to its breakers and storing the
        finished answer (before its last event goes out, so a repeat right after finds it)."""
        pieces: list[str] = []
        settled = False
        first_at = 0.0
        try:
            async for event in events:
                if not first_at:
                    first_at = time.perf_counter()
                if isinstance(event, TextDelta):
                    pieces.append(event.text)
                elif isinstance(event, Finished):
                    settled = True
                    self._breakers.record(name, modalities, ok=True)
                    usage = event.usage
                    self._metrics.generated(name, usage.completion_tokens, time.perf_counter() - dispatched)
                    if learn is not None:
                        learn(first_at, usage)
                    if key is not None and self._answers is not None:
                        model = self._tiers[name].capabilities.model
                        done = Completion("".join(pieces), event.reason, usage, model)
                        await self._answers.store(key, answer_of(done, pieces, name))
                yield event
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

    @staticmethod
    def _routed(
        tier: str,
        reason: str,
        lookup: Lookup,
        started: float,
        degraded: tuple[str, ...] = (),
        instance: str = "",
        plan: _Plan | None = None,
        served: str = "",
    ) -> Routed:
        elapsed = time.perf_counter() - started
        predicted = ""
        detail = plan.decision.detail if plan is not None else None
        if detail is not None and served in detail.predictions:
            p = detail.predictions[served]
            predicted = (
                f"ttft={p.ttft_p50 * 1000:.0f}ms, total={p.total_p50 * 1000:.0f}ms,"
                f" tokens={p.tokens:.0f}, per_token={p.per_token_s * 1000:.1f}ms"
            )
        return Routed(tier, reason, lookup.status, degraded, elapsed, lookup.seconds, instance, predicted)

    @staticmethod
    def _body(request_id: str, result: Completion, degraded: tuple[str, ...]) -> ChatCompletion:
        usage = result.usage
        return ChatCompletion(
            id=f"chatcmpl-{request_id}",
            created=int(time.time()),
            model=result.model,
            choices=[Choice(0, ResponseMessage(result.text), result.finish_reason)],
            usage=UsageBody(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
            tiergate=TiergateInfo(degraded=list(degraded)) if degraded else msgspec.UNSET,
        )


async def _opening(events: AsyncIterator[Event]) -> tuple[Started, Event]:
    """A tier's :class:`Started` and the event that comes with it (the answer's first piece)."""
    first = await anext(events)
    if not isinstance(first, Started):
        return Started(), first
    return first, await anext(events)


async def _closing(chunks: AsyncIterator[bytes], events: EventStream) -> AsyncGenerator[bytes, None]:
    """Pass ``chunks`` through; however it ends (client gone included), close the tier's stream."""
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        with contextlib.suppress(Exception):
            await events.aclose()


async def _usage_into(outcome: StreamOutcome, events: AsyncIterator[Event]) -> AsyncIterator[Event]:
    async for event in events:
        if isinstance(event, Finished):
            outcome.usage = event.usage
        yield event
