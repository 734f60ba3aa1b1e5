"""The ledger's side of a request's ending (gateway/pipeline/ending.py calls it): the tenant's tokens
are charged, one ledger row is written and the live view notes the request.

A completed answer's row is on disk (the ledger's write-ahead file) before the answer's last event
goes on, so before a JSON response is sent and before a stream's ``data: [DONE]``.  Refused requests,
answers cut short by the tier and clients that leave get a row too, written without waiting.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from gateway.accounts.ledger import (
    NANO,
    Charge,
    Ledger,
    LedgerRow,
    PriceBook,
    encode_tags,
    new_entry_id,
    request_tags,
)
from gateway.accounts.tenants import Caller, Demand, RateLimiter, Tenant, key_scope
from gateway.errors import PermissionDenied, to_gateway_error
from gateway.ops.activity import Activity, Decision
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.answer import Routed
from gateway.pipeline.answers.exact import CacheStatus
from gateway.wire.chat import AudioPart, ChatCompletionRequest, ImagePart, VideoPart
from router import NO_MEDIA, MediaSummary
from tiers import Usage


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
class Call:
    """One request as the ledger will see it."""

    caller: Caller
    tenant: Tenant
    request: ChatCompletionRequest | None  # None: another endpoint's request (embeddings)
    request_id: str
    demand: Demand
    ts: float
    started: float
    tags: str | None = None  # the cost tags (JSON), from the request's metadata and X-Tiergate-Tags
    tag_map: Mapping[str, str] | None = None  # the same, parsed (the router's tag budgets read them)
    model_asked: str = ""
    endpoint: str = "chat"  # the ledger's endpoint column: chat, responses, completions, embeddings
    residency: tuple[tuple[str, str], ...] = ()  # the residency rules that matched: (label, action)
    ttft_ms: float | None = None  # a stream's: when its first byte was ready
    ended: bool = False  # its ending ran (gateway/pipeline/ending.py): it runs once
    session: str | None = None  # its client's session (prompt_cache_key, X-Session-ID, user): re-asks


def _begun(
    caller: Caller,
    request_id: str,
    model: str,
    endpoint: str,
    request: ChatCompletionRequest | None,
    tags_header: str | None,
) -> Call:
    if caller.tenant is None:
        raise PermissionDenied(f"admin keys manage tenants; call {endpoint} with a tenant's key")
    parsed = request_tags(request.metadata if request is not None else None, tags_header)
    demand = demand_of(request) if request is not None else Demand()
    ts, started = time.time(), time.perf_counter()
    return Call(
        caller,
        caller.tenant,
        request,
        request_id,
        demand,
        ts,
        started,
        tags=encode_tags(parsed),
        tag_map=parsed,
        model_asked=model,
        endpoint=endpoint,
    )


class Recorder:
    def __init__(
        self,
        limiter: RateLimiter,
        ledger: Ledger | None,
        prices: PriceBook,
        metrics: Metrics,
        tracing: Tracing,
        activity: Activity | None = None,
    ) -> None:
        self._limiter = limiter
        self._ledger = ledger
        self._prices = prices
        self._metrics = metrics
        self._tracing = tracing
        self._activity = activity
        self._charging: set[asyncio.Task[None]] = set()  # tokens charged after a cancelled ending

    def begin(
        self,
        caller: Caller,
        request: ChatCompletionRequest,
        request_id: str,
        tags_header: str | None = None,
        endpoint: str = "chat",
    ) -> Call:
        """``tags_header``: the request's X-Tiergate-Tags (a malformed one: 400, naming it);
        ``endpoint``: the API it came by (a Responses or completions request runs as a chat)."""
        return _begun(caller, request_id, request.model, endpoint, request, tags_header)

    def begin_other(
        self, caller: Caller, model: str, request_id: str, endpoint: str, tags_header: str | None = None
    ) -> Call:
        """A request of another endpoint than chat (embeddings): counted as one request, no media."""
        return _begun(caller, request_id, model, endpoint, None, tags_header)

    async def ended(
        self,
        call: Call,
        routed: Routed | None,
        model: str,
        usage: Usage,
        status: int = 200,
        error: str | None = None,
        *,
        durable: bool = True,
    ) -> None:
        """The request ended (gateway/pipeline/ending.py says how): the tokens it produced are charged
        to the tenant's limits and written in its ledger row; ``durable``: the row is on disk before
        this returns (a completed answer's, before its last event goes on), else it is handed to the
        writer without waiting (a client that left is not kept waiting for it)."""
        self._note(call, routed, status)
        await self._charge(call, usage.total_tokens)
        if self._ledger is None:
            return
        row = self._row(call, routed, model, usage, call.ttft_ms, status=status, error=error)
        if not durable:
            self._ledger.submit(row)
            return
        started = time.perf_counter()
        with self._tracing.span("ledger.write"):
            await self._ledger.record(row)
        self._metrics.ledger_written(time.perf_counter() - started)

    def ended_now(
        self, call: Call, routed: Routed | None, model: str, usage: Usage, status: int, error: str | None
    ) -> None:
        """:meth:`ended` without waiting for anything (its task is being cancelled): the row is
        handed to the writer and the tokens are charged in the background."""
        self._note(call, routed, status)
        task = asyncio.get_running_loop().create_task(self._charge(call, usage.total_tokens))
        self._charging.add(task)
        task.add_done_callback(self._charging.discard)
        if self._ledger is not None:
            self._ledger.submit(
                self._row(call, routed, model, usage, call.ttft_ms, status=status, error=error)
            )

    async def _charge(self, call: Call, tokens: int) -> None:
        """The tokens go to the tenant's per-minute count, and to its key's when it has a limit."""
        await self._limiter.charge_tokens(call.tenant, tokens)
        scope = key_scope(call.caller.key_id, call.caller.limits)
        if scope is not None:
            await self._limiter.charge_tokens(scope, tokens)

    def shadowed(self, call: Call, tier: str, model: str, usage: Usage, started: float) -> float:
        """A shadow comparison of ``call``'s answer (gateway/accounts/quality/shadow.py) asked of
        ``tier``: a ledger row of its own (endpoint ``shadow``, request id ``shadow-<the answer's>``),
        billed to the tenant apart from the answer, written without waiting; what it cost, in USD."""
        shadow = dataclasses.replace(
            call, request_id=f"shadow-{call.request_id}", endpoint="shadow", ts=time.time(), started=started
        )
        row = self._row(shadow, Routed(tier, "shadow comparison"), model, usage, None)
        if self._ledger is not None:
            self._ledger.submit(row)
        return row.cost_nusd / NANO

    def failed(self, call: Call, exc: Exception) -> None:
        error = to_gateway_error(exc)
        self._note(call, None, error.status, error.message)
        if self._ledger is not None:
            row = self._row(call, None, "", Usage(0, 0), None, status=error.status, error=error.message)
            self._ledger.submit(row)

    def _note(self, call: Call, routed: Routed | None, status: int, reason: str = "") -> None:
        if self._activity is None:
            return
        self._activity.note(
            Decision(
                ts=call.ts,
                tenant=call.tenant.name,
                model_asked=call.model_asked,
                tier=routed.tier if routed is not None else "",
                reason=routed.reason if routed is not None else reason,
                cache=routed.cache.value if routed is not None else "bypass",
                status=status,
                latency_ms=(time.perf_counter() - call.started) * 1000,
                degraded=routed.degraded if routed is not None else (),
                residency=call.residency,
            )
        )

    def _row(
        self,
        call: Call,
        routed: Routed | None,
        model: str,
        usage: Usage,
        ttft_ms: float | None,
        *,
        status: int = 200,
        error: str | None = None,
    ) -> LedgerRow:
        row = self._priced(call, routed, model, usage, ttft_ms, status, error)
        if self._activity is not None and row.tier:
            self._activity.spent(row.tier, row.cost_nusd, row.day)
        return row

    def _priced(
        self,
        call: Call,
        routed: Routed | None,
        model: str,
        usage: Usage,
        ttft_ms: float | None,
        status: int,
        error: str | None,
    ) -> LedgerRow:
        prompt, completion = usage.prompt_tokens, usage.completion_tokens
        tier = routed.tier if routed is not None else ""
        hit = routed is not None and routed.cache in (CacheStatus.HIT, CacheStatus.SEMANTIC)
        total_s = time.perf_counter() - call.started
        images, media_s = call.demand.images, float(call.demand.video_seconds + call.demand.audio_seconds)
        # A cached answer ran no model: it costs nothing, and saves what the tier would have charged.
        busy_s = 0.0 if hit else total_s
        cache = (usage.cached_tokens, usage.cache_write_tokens)
        charge = self._prices.charge(tier, model, prompt, completion, images, media_s, busy_s, cache)
        # Every generating endpoint (chat, Responses, completions, Messages) ran on a chat tier, so the
        # same tokens on the all-cloud tier are its counterfactual; an embedding's is its own cost (the
        # cloud chat tier's price says nothing of embeddings).
        if tier and tier != self._prices.counterfactual_tier and call.endpoint != "embeddings":
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
            model_asked=call.model_asked,
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
            metadata=_metadata_of(call.request) if call.request is not None else None,
            tags=call.tags,
            endpoint=call.endpoint,
            cached_tokens=usage.cached_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )


def _metadata_of(request: ChatCompletionRequest) -> str | None:
    """The request's metadata as the ledger keeps it (JSON; bounded by the request model)."""
    return msgspec.json.encode(request.metadata).decode() if request.metadata else None
