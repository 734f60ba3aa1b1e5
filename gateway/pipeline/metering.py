"""Chat with a tenant's limits and a ledger row: wraps :class:`~gateway.pipeline.chat.ChatService`.

For each request: admit it against the tenant's limits (429 + Retry-After), let the chat
service answer, charge the tokens used, and record one ledger row.  A 200's row is on disk
(the ledger's write-ahead file) before the response's last byte leaves: for a JSON answer
before the response is returned, for a stream before ``data: [DONE]``.  Failed requests
get a row too, written without waiting.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from gateway.accounts.ledger import Charge, Ledger, LedgerRow, PriceBook, new_entry_id
from gateway.accounts.tenants import Caller, Demand, RateLimiter, Tenant
from gateway.api.protocol import AudioPart, ChatCompletion, ChatCompletionRequest, ImagePart, VideoPart
from gateway.api.sse import DONE
from gateway.errors import PermissionDenied, to_gateway_error
from gateway.media import MediaPipeline, has_media
from gateway.ops.activity import Activity, Decision
from gateway.pipeline.caching import CacheStatus
from gateway.pipeline.chat import ChatService, RequestContext, Routed, StreamOutcome, StreamStart
from router import NO_MEDIA, MediaSummary

_ERROR_EVENT = b'data: {"error"'


def demand_of(request: ChatCompletionRequest, media: MediaSummary = NO_MEDIA) -> Demand:
    """Parts counted from the request; seconds from what preprocessing measured (``media``)."""
    images = audio = video = 0
    for message in request.messages:
        if isinstance(message.content, list):
            for part in message.content:
                if isinstance(part, ImagePart):
                    images += 1
                elif isinstance(part, AudioPart):
                    audio += 1
                elif isinstance(part, VideoPart):
                    video += 1
    return Demand(
        images=images,
        audio=audio,
        video=video,
        video_seconds=math.ceil(media.video_seconds),
        audio_seconds=math.ceil(media.audio_seconds),
    )


@dataclass(slots=True)
class _Call:
    """One request as the ledger will see it."""

    caller: Caller
    tenant: Tenant
    request: ChatCompletionRequest
    request_id: str
    demand: Demand
    ts: float
    started: float


class MeteredChat:
    def __init__(
        self,
        chat: ChatService,
        limiter: RateLimiter,
        ledger: Ledger | None,
        prices: PriceBook,
        media: MediaPipeline | None = None,
        activity: Activity | None = None,
    ) -> None:
        self._chat = chat
        self._limiter = limiter
        self._ledger = ledger
        self._prices = prices
        self._metrics = chat.metrics
        self._tracing = chat.tracing
        self._media = media
        self._activity = activity

    async def _prepare(
        self, call: _Call, ctx: RequestContext | None
    ) -> tuple[ChatCompletionRequest, RequestContext]:
        """Preprocess the request's media (before admission: the limits count their seconds)."""
        ctx = ctx or RequestContext()
        if self._media is None or not has_media(call.request):
            return call.request, ctx
        prepared = await self._media.prepare(call.request)
        call.demand = demand_of(call.request, prepared.summary)
        return prepared.request, dataclasses.replace(ctx, media=prepared.summary)

    def _begin(self, caller: Caller, request: ChatCompletionRequest, request_id: str) -> _Call:
        if caller.tenant is None:
            raise PermissionDenied("admin keys manage tenants; chat with a tenant's key")
        return _Call(
            caller, caller.tenant, request, request_id, demand_of(request), time.time(), time.perf_counter()
        )

    async def complete(
        self,
        caller: Caller,
        request: ChatCompletionRequest,
        request_id: str,
        ctx: RequestContext | None = None,
    ) -> tuple[Routed, ChatCompletion]:
        call = self._begin(caller, request, request_id)
        try:
            with self._tracing.span("media"):
                request, ctx = await self._prepare(call, ctx)
            with self._tracing.span("rate_limit"):
                await self._limiter.admit(call.tenant, call.demand)
            routed, completion = await self._chat.complete(request, request_id, ctx)
        except Exception as exc:
            self._failed(call, exc)
            raise
        usage = completion.usage
        self._note(call, routed, 200)
        await self._limiter.charge_tokens(call.tenant, usage.total_tokens)
        if self._ledger is not None:
            row = self._row(call, routed, completion.model, usage.prompt_tokens, usage.completion_tokens)
            await self._record(row)
        return routed, completion

    async def _record(self, row: LedgerRow) -> None:
        """Write a 200's row durably, timed."""
        assert self._ledger is not None
        started = time.perf_counter()
        with self._tracing.span("ledger.write"):
            await self._ledger.record(row)
        self._metrics.ledger_written(time.perf_counter() - started)

    async def stream(
        self,
        caller: Caller,
        request: ChatCompletionRequest,
        request_id: str,
        ctx: RequestContext | None = None,
    ) -> StreamStart:
        call = self._begin(caller, request, request_id)
        try:
            with self._tracing.span("media"):
                request, ctx = await self._prepare(call, ctx)
            with self._tracing.span("rate_limit"):
                await self._limiter.admit(call.tenant, call.demand)
            start = await self._chat.stream(request, request_id, ctx)
        except Exception as exc:
            self._failed(call, exc)
            raise
        ttft_ms = (time.perf_counter() - call.started) * 1000
        events = self._metered(call, start, ttft_ms)
        return StreamStart(start.routed, events, start.outcome)

    async def _metered(self, call: _Call, start: StreamStart, ttft_ms: float) -> AsyncGenerator[bytes, None]:
        outcome: StreamOutcome = start.outcome
        recorded = False
        error: str | None = "the client went away before the stream ended"
        try:
            async for event in start.events:
                if event.endswith(DONE):
                    self._note(call, start.routed, 200)
                    usage = outcome.usage
                    prompt, completion = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
                    await self._limiter.charge_tokens(call.tenant, prompt + completion)
                    if self._ledger is not None:
                        row = self._row(call, start.routed, outcome.model, prompt, completion, ttft_ms)
                        await self._record(row)
                    recorded = True
                elif event.startswith(_ERROR_EVENT):
                    error = "the tier failed mid-stream: " + event.decode(errors="replace")[6:].strip()
                yield event
        finally:
            if not recorded:
                self._note(call, start.routed, 499 if (error or "").startswith("the client") else 502)
            if not recorded and self._ledger is not None:
                usage = outcome.usage
                prompt, completion = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
                row = self._row(call, start.routed, outcome.model, prompt, completion, ttft_ms, error=error)
                self._ledger.submit(row)

    def _note(self, call: _Call, routed: Routed | None, status: int, reason: str = "") -> None:
        if self._activity is None:
            return
        self._activity.note(
            Decision(
                ts=call.ts,
                tenant=call.tenant.name,
                model_asked=call.request.model,
                tier=routed.tier if routed is not None else "",
                reason=routed.reason if routed is not None else reason,
                cache=routed.cache.value if routed is not None else "bypass",
                status=status,
                latency_ms=(time.perf_counter() - call.started) * 1000,
                degraded=routed.degraded if routed is not None else (),
            )
        )

    def _failed(self, call: _Call, exc: Exception) -> None:
        error = to_gateway_error(exc)
        self._note(call, None, error.status, error.message)
        if self._ledger is None:
            return
        row = self._row(call, None, "", 0, 0, status=error.status, error=error.message)
        self._ledger.submit(row)

    def _row(
        self,
        call: _Call,
        routed: Routed | None,
        model: str,
        prompt: int,
        completion: int,
        ttft_ms: float | None = None,
        *,
        status: int = 200,
        error: str | None = None,
    ) -> LedgerRow:
        tier = routed.tier if routed is not None else ""
        hit = routed is not None and routed.cache is CacheStatus.HIT
        total_s = time.perf_counter() - call.started
        images, media_s = call.demand.images, float(call.demand.video_seconds + call.demand.audio_seconds)
        # A cached answer ran no model: it costs nothing, and saves what the tier would have charged.
        busy_s = 0.0 if hit else total_s
        charge = self._prices.charge(tier, model, prompt, completion, images, media_s, busy_s)
        if tier and tier != self._prices.counterfactual_tier:
            counterfactual = self._prices.counterfactual(prompt, completion, images, media_s, total_s)
        else:
            counterfactual = charge.cost_nusd
        if hit:
            charge = Charge(None, 0)
        return LedgerRow(
            entry_id=new_entry_id(),
            request_id=call.request_id,
            tenant_id=call.tenant.id,
            key_id=call.caller.key_id,
            ts=call.ts,
            day=time.strftime("%Y-%m-%d", time.gmtime(call.ts)),
            model_asked=call.request.model,
            tier=tier,
            model_used=model,
            route_reason=routed.reason if routed is not None else "",
            prompt_tokens=prompt,
            completion_tokens=completion,
            images=call.demand.images,
            audio=call.demand.audio,
            video=call.demand.video,
            ttft_ms=ttft_ms,
            total_ms=total_s * 1000,
            cache_hit=hit,
            degraded=bool(routed is not None and routed.degraded),
            status=status,
            error=error,
            price_id=charge.price_id,
            cost_nusd=charge.cost_nusd,
            counterfactual_nusd=counterfactual,
        )
