"""The path of one chat request, stage by stage: read :meth:`ChatPipeline.run`, then
:meth:`ChatService.answer`.

     1 authenticate   the API key → the caller and its tenant        gateway/accounts/tenants/
     2 parse          OpenAI's request shape, strictly               gateway/api/protocol.py
       model          an unknown model is a 404                       gateway/pipeline/tierset.py
     3 limit          the tenant's limits: requests, media parts      gateway/accounts/tenants/
       residency      the tenant's rules on sensitive text: refuse,   gateway/residency/
                      keep on local tiers, or redact for remote ones
     4 media          fetch and decode, off the event loop, cached;   gateway/media/
                      then the seconds they measured are charged
     5 cache          an exact repeat is answered from the cache      gateway/pipeline/caching.py
                      then, if the policy says so, a paraphrase        gateway/pipeline/semantic/
     6 plan           features → the router's decision (+ degrading)  gateway/pipeline/plan.py, router/
     7 admit          bounded lanes per tier → 429 beyond them        gateway/pipeline/admission.py
     8 dispatch       the tier's one generation method, failover      gateway/pipeline/dispatch.py
     9 frame          JSON or SSE, from the same events (the caller)  gateway/api/framing.py
    10 record         tokens charged, ledger row, the live view       gateway/pipeline/record.py

JSON and streamed requests take the same stages; they differ in how the answer is framed, and in
that a JSON answer is read whole before it is framed (so it can still fail over).

Every generating endpoint runs these stages: the Responses API and legacy completions bring their
own stage 2 (``Incoming.parse``, which translates their body into this chat request; completions
set ``raw_prompt``) and frame the same events their way (gateway/api/responses/, completions/).
Embeddings generate nothing: their stages (gateway/pipeline/embeddings/stages.py) use the same
authenticator, limiter, cache store and recorder, in the same order.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

import msgspec

import router
from gateway.accounts.policies import PolicyBook
from gateway.accounts.tenants import DEFAULT_TENANT, Authenticator, Caller, RateLimiter
from gateway.errors import InvalidRequest, PermissionDenied
from gateway.media import MediaPipeline, has_media
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.answer import Answer, Routed, whole
from gateway.pipeline.caching import AnswerCache, CacheStatus, Lookup, cache_directives
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.plan import Planner
from gateway.pipeline.record import Call, Recorder, demand_of
from gateway.pipeline.routing import RoutingService
from gateway.pipeline.semantic import Asked, SemanticCache
from gateway.pipeline.tierset import TierSet
from gateway.residency import NOTHING, Rule, Verdict, compiled, scan
from gateway.wire.chat import ChatCompletionRequest, parse_chat_request
from tiers import Event, ToolCallDelta

OFF = router.SemanticCachePolicy()


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
    strategy: str = ""  # the routing strategy of the model alias the client named, if any
    # Legacy completions: the one user turn is the prompt, sent to the model as it is (no chat
    # template); part of the cache key.
    raw_prompt: bool = False
    residency: Verdict = NOTHING  # what the tenant's residency rules found in the request
    tags: Mapping[str, str] | None = None  # its cost tags, for the tag budgets
    # The tenant's semantic cache policy (off unless it says so).
    semantic: router.SemanticCachePolicy = OFF


# Stage 2 for one endpoint: its request body, for a known tenant, as the chat request the stages
# take. Chat Completions' is a plain decode; the Responses API reads the tenant's stored conversation
# (previous_response_id), so it needs the tenant.
Parse = Callable[[bytes, str], Awaitable[ChatCompletionRequest]]


async def parse_chat(body: bytes, tenant: str) -> ChatCompletionRequest:
    return parse_chat_request(body)


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request as the HTTP face hands it over: Chat Completions', or another endpoint's with the
    translation to it (``parse``)."""

    headers: Mapping[str, str]  # the few the chat path reads, lower-case names
    body: Callable[[], Awaitable[bytes]]  # reads the body (bounded); called once the caller is known
    request_id: str
    # Told the tenant and the model as soon as they are known (metric labels, the log context).
    noted: Callable[[str, str], None] = lambda tenant, model: None
    parse: Parse = parse_chat
    raw_prompt: bool = False  # see RequestContext.raw_prompt
    endpoint: str = "chat"  # the API it came by, for the ledger: chat, responses, completions


class ChatService:
    """Stages 5–8 for a validated request of a known tenant: the cache, the plan, the dispatch."""

    def __init__(
        self,
        tiers: TierSet,
        metrics: Metrics,
        tracing: Tracing,
        *,
        rule: router.AutoRule | None = None,
        answers: AnswerCache | None = None,
        semantic: SemanticCache | None = None,
        routing: RoutingService | None = None,
        fail_instead_of_degrade: bool = False,
    ) -> None:
        self.tiers = tiers
        self.metrics = metrics
        self._answers = answers
        self._semantic = semantic
        self._tracing = tracing
        decide = routing.decide if routing is not None else None
        self._planner = Planner(
            tiers, metrics, tracing, decide=decide, rule=rule, fail_instead_of_degrade=fail_instead_of_degrade
        )
        self._dispatcher = Dispatcher(
            tiers, metrics, tracing, answers=answers, semantic=semantic, routing=routing
        )

    async def answer(self, request: ChatCompletionRequest, request_id: str, ctx: RequestContext) -> Answer:
        started = time.perf_counter()
        lookup = await self._lookup(request, ctx)  # 5 cache
        if lookup.answer is not None:
            answer = self._replayed(lookup, request_id, started)
        else:
            plan = self._planner.plan(  # 6 plan
                request,
                ctx.tenant,
                ctx.media,
                ctx.fail_instead_of_degrade,
                strategy=ctx.strategy,
                residency=ctx.residency,
                tags=ctx.tags,
            )
            generation = plan.generation(request_id, ctx.session_id, ctx.tenant, raw_prompt=ctx.raw_prompt)
            answer = await self._dispatcher.dispatch(plan, generation, lookup, started)  # 7 admit, 8 dispatch
        return dataclasses.replace(
            answer, stream=request.stream, include_usage=request.include_usage, choices=request.n
        )

    async def _lookup(self, request: ChatCompletionRequest, ctx: RequestContext) -> Lookup:
        if self._answers is None or not ctx.use_cache:
            return Lookup(CacheStatus.BYPASS)
        answers = self._answers
        tier_models = f"{self.tiers.served_models()}|{ctx.strategy}|{'raw' if ctx.raw_prompt else 'chat'}"
        with self._tracing.span("cache.lookup") as span:
            lookup = await answers.lookup(request, ctx.tenant, ctx.cache_control, tier_models)
            if self._semantic is not None and ctx.semantic.enabled:
                asked = Asked(
                    request,
                    ctx.tenant,
                    ctx.semantic,
                    cache_directives(ctx.cache_control),
                    lambda r: answers.key(r, ctx.tenant, tier_models),
                )
                lookup = await self._semantic.lookup(asked, lookup)
            if span is not None:
                span.set_attribute("tiergate.cache", lookup.status.value)
        return answers.count(lookup)

    @staticmethod
    def _replayed(lookup: Lookup, request_id: str, started: float) -> Answer:
        """A cached answer, replayed as the pieces it was first streamed in."""
        cached, events = lookup.answer, lookup.events
        assert cached is not None and events is not None
        elapsed = time.perf_counter() - started
        reason = "cache hit" if lookup.similarity is None else f"semantic cache hit ({lookup.similarity:.3f})"
        routed = Routed(
            cached.tier,
            reason,
            lookup.status,
            (),
            elapsed,
            lookup.seconds,
            similarity=lookup.similarity,
            embed_s=lookup.embed_s,
        )
        return whole(routed, cached.model, fresh_call_ids(events), f"chatcmpl-{request_id}")

    async def aclose(self) -> None:
        if self._answers is not None:
            await self._answers.aclose()


def fresh_call_ids(events: list[Event]) -> list[Event]:
    """A replayed answer's tool calls get ids of their own: an agent keeps results by call id."""
    if not any(isinstance(e, ToolCallDelta) and e.id for e in events):
        return events
    return [
        msgspec.structs.replace(e, id=f"call_{secrets.token_hex(12)}")
        if isinstance(e, ToolCallDelta) and e.id
        else e
        for e in events
    ]


class RuleBook:
    """Each policy's residency rules, compiled once (policies change rarely; at most LIMIT kept)."""

    LIMIT = 1024

    def __init__(self) -> None:
        self._compiled: dict[bytes, tuple[Rule, ...]] = {}

    def of(self, rules: list[router.ResidencyRule]) -> tuple[Rule, ...]:
        if not rules:
            return ()
        key = msgspec.json.encode(rules)
        found = self._compiled.get(key)
        if found is None:
            if len(self._compiled) >= self.LIMIT:
                self._compiled.clear()
            found = self._compiled[key] = compiled(rules)
        return found


class ChatPipeline:
    """Every stage of a chat request, in order; the caller frames the answer (stage 9)."""

    def __init__(
        self,
        chat: ChatService,
        auth: Authenticator,
        policies: PolicyBook,
        limiter: RateLimiter,
        recorder: Recorder,
        tracing: Tracing,
        media: MediaPipeline | None = None,
    ) -> None:
        self._chat = chat
        self._auth = auth
        self._policies = policies
        self._limiter = limiter
        self._recorder = recorder
        self._tracing = tracing
        self._media = media
        self._metrics = chat.metrics
        self._rules = RuleBook()

    async def run(self, incoming: Incoming) -> Answer:
        with self._tracing.span("auth"):
            caller = await self._auth.caller(incoming.headers)  # 1 authenticate
        ctx = self._context(caller, incoming)
        request = await incoming.parse(await incoming.body(), ctx.tenant)  # 2 parse
        incoming.noted(ctx.tenant, request.model)
        tags = incoming.headers.get("x-tiergate-tags")  # cost tags; a malformed header: 400
        call = self._recorder.begin(
            caller, request, incoming.request_id, tags, incoming.endpoint
        )  # the ledger's
        ctx = dataclasses.replace(ctx, tags=call.tag_map)
        try:
            request, ctx = self._resolve(request, ctx)  # an unknown model: 404
            with self._tracing.span("rate_limit"):
                await self._limiter.admit(call.tenant, call.demand)  # 3 limit: requests, media parts
            ctx = self._residency(call, request, ctx)  # 3 limit: residency rules
            with self._tracing.span("media"):
                request, ctx = await self._prepare_media(call, request, ctx)  # 4 media (+ their seconds)
            answer = await self._chat.answer(request, incoming.request_id, ctx)  # 5–8
        except Exception as exc:
            self._recorder.failed(call, exc)
            raise
        return await self._recorder.recorded(call, answer)  # 10 record, as the answer ends

    def _context(self, caller: Caller, incoming: Incoming) -> RequestContext:
        if caller.tenant is None:  # before the parse stage reads any of a tenant's data
            raise PermissionDenied("admin keys manage tenants; chat with a tenant's key")
        tenant = caller.tenant.name
        policy = self._policies.policy(tenant)  # in memory; edits take effect on the next request
        headers = incoming.headers
        return RequestContext(
            tenant=tenant,
            cache_control=headers.get("cache-control", ""),
            session_id=headers.get("x-session-id") or None,
            use_cache=policy.cache,
            semantic=policy.semantic_cache,
            fail_instead_of_degrade=policy.fail_instead_of_degrade,
            raw_prompt=incoming.raw_prompt,
        )

    def _residency(self, call: Call, request: ChatCompletionRequest, ctx: RequestContext) -> RequestContext:
        """What the tenant's residency rules find in the request's text (the live view counts the rules
        that matched, refused requests too); a ``refuse`` is a 400."""
        rules = self._rules.of(self._policies.policy(ctx.tenant).residency)
        if not rules:
            return ctx
        with self._tracing.span("residency"):
            verdict = scan(msgspec.to_builtins(request.messages), rules)
        call.residency = verdict.fired
        for label, action in verdict.fired:
            self._metrics.residency.labels(label, action).inc()
        if refused := verdict.first("refuse"):
            raise InvalidRequest(
                f"this request contains data that residency rule {refused!r} does not allow to be sent",
                param="messages",
                code="residency_refused",
            )
        return dataclasses.replace(ctx, residency=verdict)

    def _resolve(
        self, request: ChatCompletionRequest, ctx: RequestContext
    ) -> tuple[ChatCompletionRequest, RequestContext]:
        """The model the request names (an alias stands for tiergate-auto or a tier); 404 if none."""
        model, strategy = self._chat.tiers.resolve(request.model)
        if model == request.model:
            return request, ctx
        return msgspec.structs.replace(request, model=model), dataclasses.replace(ctx, strategy=strategy)

    async def _prepare_media(
        self, call: Call, request: ChatCompletionRequest, ctx: RequestContext
    ) -> tuple[ChatCompletionRequest, RequestContext]:
        """Preprocess the request's media, once the cheap checks passed (the key, the model, the
        request and part counts); then the seconds they measured are charged to the tenant's limits."""
        if self._media is None or not has_media(request):
            return request, ctx
        prepared = await self._media.prepare(request)
        call.demand = demand_of(request, prepared.summary)
        seconds = dataclasses.replace(
            call.demand, images=0, audio=0, video=0, request=False
        )  # the parts were counted at admission
        if seconds.video_seconds or seconds.audio_seconds:
            await self._limiter.admit(call.tenant, seconds)
        return prepared.request, dataclasses.replace(ctx, media=prepared.summary)
