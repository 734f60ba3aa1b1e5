"""The path of one chat request, stage by stage: read :meth:`ChatPipeline.run`, then
:meth:`ChatService.answer`.

     1 authenticate   the API key → the caller and its tenant        gateway/pipeline/front.py
     2 parse          OpenAI's request shape, strictly               gateway/wire/chat.py
       model          an unknown model is a 404                       gateway/pipeline/tierset.py
     3 limit          the tenant's limits: requests, media parts      gateway/pipeline/front.py
       residency      the tenant's rules on sensitive text: refuse,   gateway/pipeline/front.py
                      keep on local tiers, or redact for remote ones
     4 media          fetch and decode, off the event loop, cached;   gateway/media/
                      then the seconds they measured are charged
     5 cache          an exact repeat is answered from the cache      gateway/pipeline/answers/exact.py
                      then, if the policy says so, a paraphrase        gateway/pipeline/answers/semantic/
     6 plan           features → the router's decision (+ degrading)  gateway/pipeline/plan.py, router/
     7 admit          bounded lanes per tier → 429 beyond them        gateway/pipeline/admission.py
     8 dispatch       the tier's one generation method, failover      gateway/pipeline/dispatch.py
     9 frame          JSON or SSE, from the same events (the caller)  gateway/api/framing.py
    10 end            however it ends: tokens charged, ledger row,    gateway/pipeline/ending.py
                      breaker, router, cache store, live view

JSON and streamed requests take the same stages; they differ in how the answer is framed, and in
that a JSON answer is read whole before it is framed (so it can still fail over, and it ends in
stage 8), where a stream ends as its events do (a client that closes it is billed what was made).

Every generating endpoint runs these stages: the Responses API and legacy completions bring their
own stage 2 (``Incoming.parse``, which translates their body into this chat request; completions
set ``raw_prompt``) and frame the same events their way (gateway/api/responses/, completions/).
Embeddings generate nothing: they take the same front (stages 1–3, residency included, in
gateway/pipeline/front.py) and the same ledger (gateway/pipeline/endpoints/embeddings/stages.py).
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

import router
from gateway.accounts.quality.feedback import Outcomes
from gateway.accounts.quality.shadow import Shadows
from gateway.accounts.tenants import DEFAULT_TENANT, Demand
from gateway.errors import ModelNotFound
from gateway.media import MediaPipeline, has_media
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.answer import Answer, Routed, whole
from gateway.pipeline.answers import Answers
from gateway.pipeline.answers.exact import BYPASS, AnswerCache, Lookup
from gateway.pipeline.answers.semantic import SemanticCache
from gateway.pipeline.dispatch import Dispatcher
from gateway.pipeline.ending import Ending
from gateway.pipeline.endpoints.hearing import Hearing, Listened
from gateway.pipeline.front import Front, Incoming
from gateway.pipeline.plan import Planner, features_of
from gateway.pipeline.record import Call, Recorder, demand_of
from gateway.pipeline.routing_service import RoutingService
from gateway.pipeline.tierset import Catalogue, TierSet
from gateway.residency import NOTHING, Verdict
from gateway.wire.chat import ChatCompletionRequest, ImagePart
from tiers import Event, ToolCallDelta, Usage

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
    # What happened to media before planning (audio heard as its transcript: gateway/pipeline/endpoints/),
    # for X-Tiergate-Degraded, and what the route reason adds.
    degraded: tuple[str, ...] = ()
    note: str = ""
    tiers: tuple[str, ...] = ()  # the tiers its key may use (empty: every tier)
    cache_marks: Sequence[dict[str, Any]] = ()  # the prompt-cache breakpoints it marked (Incoming's)


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
        recorder: Recorder | None = None,
        fail_instead_of_degrade: bool = False,
        outcomes: Outcomes | None = None,
        shadows: Shadows | None = None,
    ) -> None:
        """``recorder``: the ledger's side of each request's ending (none: tiers, cache, router only);
        ``outcomes``: the answers kept for their labels (gateway/accounts/quality/feedback.py); ``shadows``:
        the shadow comparisons tenants' policies may turn on (gateway/accounts/quality/shadow.py)."""
        self.tiers = tiers
        self.metrics = metrics
        self._routing = routing
        self._answers = Answers(answers, semantic, tracing)  # exact, and semantic behind it
        decide = routing.decide if routing is not None else None
        self._planner = Planner(
            tiers, metrics, tracing, decide=decide, rule=rule, fail_instead_of_degrade=fail_instead_of_degrade
        )
        self.ending = Ending(
            tiers,
            metrics,
            answers=self._answers,
            routing=routing,
            recorder=recorder,
            outcomes=outcomes,
            shadows=shadows,
        )
        self._dispatcher = Dispatcher(tiers, metrics, tracing, self.ending)

    async def answer(
        self, request: ChatCompletionRequest, request_id: str, ctx: RequestContext, call: Call | None = None
    ) -> Answer:
        """Stages 5–8; ``call``: the request as the ledger sees it (its ending records it)."""
        started = time.perf_counter()
        lookup = await self._lookup(request, ctx)  # 5 cache
        if lookup.answer is not None:
            answer = await self._replayed(lookup, request_id, started, request.streamed, call)
        else:
            plan = self._planner.plan(  # 6 plan
                request,
                ctx.tenant,
                ctx.media,
                ctx.fail_instead_of_degrade,
                strategy=ctx.strategy,
                residency=ctx.residency,
                tags=ctx.tags,
                degraded_before=ctx.degraded,
                note=ctx.note,
                allowed=ctx.tiers,
                relaxed=call is not None and call.deferred,
            )
            generation = plan.generation(request_id, ctx.session_id, ctx.tenant, raw_prompt=ctx.raw_prompt)
            generation.cache_marks = list(ctx.cache_marks)
            generation.background = call is not None and call.deferred
            answer = await self._dispatcher.dispatch(
                plan, generation, lookup, started, call
            )  # 7 admit, 8 dispatch
        if call is not None and request.stream:
            call.ttft_ms = (time.perf_counter() - call.started) * 1000  # its first byte is ready
        return dataclasses.replace(
            answer,
            stream=request.streamed,
            include_usage=request.include_usage,
            choices=request.choices,
            obfuscate=request.obfuscated,
        )

    def prompt_tokens(self, request: ChatCompletionRequest) -> int:
        """The prompt's length in tokens before any tier reads it: the router's estimate, calibrated per
        tier from the counts the tiers reported (router/_learning/tokens.py); the named tier's, and for
        ``tiergate-auto`` the largest of the tiers' (what the prompt counts wherever it is served)."""
        images = sum(
            isinstance(p, ImagePart)
            for m in request.messages
            if isinstance(m.content, list)
            for p in m.content
        )
        features = features_of(request, router.MediaSummary(images=images))
        names = [request.model] if request.model in self.tiers.tiers else list(self.tiers.tiers)
        if self._routing is None or not names:
            return features.prompt_tokens
        return max(self._routing.learner.tokens.estimate(name, features) for name in names)

    async def _lookup(self, request: ChatCompletionRequest, ctx: RequestContext) -> Lookup:
        if not ctx.use_cache:
            return BYPASS
        tier_models = f"{self.tiers.served_models()}|{ctx.strategy}|{'raw' if ctx.raw_prompt else 'chat'}"
        return await self._answers.lookup(request, ctx.tenant, ctx.cache_control, tier_models, ctx.semantic)

    async def _replayed(
        self, lookup: Lookup, request_id: str, started: float, stream: bool, call: Call | None
    ) -> Answer:
        """A cached answer, replayed as the pieces it was first streamed in; it ends as the others do."""
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
        answer = whole(routed, cached.model, fresh_call_ids(events), f"chatcmpl-{request_id}")
        if stream:
            return dataclasses.replace(answer, events=self.ending.watched(call, None, answer, answer.events))
        usage = answer.finished.usage if answer.finished is not None else Usage(0, 0)
        await self.ending.completed(call, routed, answer.model, usage)
        return answer

    async def aclose(self) -> None:
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


class ChatPipeline:
    """Every stage of a chat request, in order; the caller frames the answer (stage 9)."""

    def __init__(
        self,
        chat: ChatService,
        front: Front,
        tracing: Tracing,
        media: MediaPipeline | None = None,
        hearing: Hearing | None = None,
        catalogue: Catalogue | None = None,
    ) -> None:
        """``hearing``: audio no tier takes becomes its transcript (none: it is refused as before);
        ``catalogue``: the other endpoints' models, named in the error for one of them named here."""
        self._catalogue = catalogue or Catalogue()
        self._chat = chat
        self._front = front
        self.front = front  # every endpoint's way in: POST /v1/feedback takes it too
        self._tracing = tracing
        self._media = media
        self._hearing = hearing

    async def run(self, incoming: Incoming) -> Answer:
        caller = await self._front.caller(incoming)  # 1 authenticate
        tenant = caller.tenant.name if caller.tenant is not None else DEFAULT_TENANT
        request = await incoming.parse(await incoming.body(), tenant)  # 2 parse
        incoming.noted(tenant, request.model)
        call = self._front.begin(caller, incoming, request.model, request)  # the ledger's; its cost tags
        try:
            model, strategy = self._resolve(request.model, incoming.endpoint)  # an unknown model: 404
            if model != request.model:  # an alias stands for tiergate-auto or a tier
                request = msgspec.structs.replace(request, model=model)
            await self._front.admit(call)  # 3 limit: the key's, then requests, media parts
            self._front.tier_allowed(call, self._pinned(model, strategy))  # a key's tiers
            param = "messages" if incoming.endpoint in ("chat", "messages") else "input"
            verdict = self._front.residency(call, msgspec.to_builtins(request.messages), param)  # residency
            with self._tracing.span("media"):
                request, media = await self._prepare_media(call, request)  # 4 media (+ their seconds)
            policy = self._front.policies.policy(tenant)  # in memory; edits apply to the next request
            heard = Listened(request, media)
            if self._hearing is not None:  # audio no tier takes: its transcript
                with self._tracing.span("transcribe"):
                    heard = await self._hearing.listen(
                        request, media, policy.fail_instead_of_degrade, caller.limits.tiers
                    )
                request, media = heard.request, heard.media
                if heard.changed:  # the tenant's rules read the transcript too
                    verdict = self._front.residency(call, msgspec.to_builtins(request.messages), param)
            headers = incoming.headers
            end_user = request.safety_identifier or request.user
            call.session = request.prompt_cache_key or headers.get("x-session-id") or end_user
            ctx = RequestContext(  # what the tenant's policy and the request ask of stages 5–8, once
                tenant=tenant,
                cache_control=headers.get("cache-control", ""),
                use_cache=policy.cache,
                fail_instead_of_degrade=policy.fail_instead_of_degrade,
                session_id=headers.get("x-session-id") or None,
                media=media,
                strategy=strategy,
                raw_prompt=incoming.raw_prompt,
                residency=verdict,
                tags=call.tag_map,
                semantic=policy.semantic_cache,
                degraded=heard.degraded,
                note=heard.note,
                tiers=caller.limits.tiers,
                cache_marks=incoming.cache_marks,
            )
            return await self._chat.answer(request, incoming.request_id, ctx, call)  # 5–8, then its ending
        except BaseException as exc:  # refused, or its client left (unless it ended already)
            self._chat.ending.refused(call, exc)
            raise

    async def count(self, incoming: Incoming) -> tuple[int, Routed]:
        """A prompt's tokens, nothing generated (Anthropic's count_tokens): stages 1–3 as for an answer
        (the key, the model, the limits, the residency rules), then :meth:`ChatService.prompt_tokens`;
        it ends as any request does, a ledger row of no tokens."""
        started = time.perf_counter()
        caller = await self._front.caller(incoming)  # 1 authenticate
        tenant = caller.tenant.name if caller.tenant is not None else DEFAULT_TENANT
        request = await incoming.parse(await incoming.body(), tenant)  # 2 parse
        incoming.noted(tenant, request.model)
        call = self._front.begin(caller, incoming, request.model, request)
        try:
            model, _ = self._resolve(request.model, incoming.endpoint)  # an unknown model: 404
            await self._front.admit(call, Demand())  # 3 limit: a request (its media are not fetched)
            self._front.residency(call, msgspec.to_builtins(request.messages), "messages")
            tokens = self._chat.prompt_tokens(msgspec.structs.replace(request, model=model))
        except BaseException as exc:
            self._chat.ending.refused(call, exc)
            raise
        routed = Routed("", "token count (estimated)", server_s=time.perf_counter() - started)
        await self._chat.ending.completed(call, routed, model, Usage(0, 0))  # 10 the ending
        return tokens, routed

    def _pinned(self, model: str, strategy: str) -> str | None:
        """The tier a request is pinned to: named, or by an alias's ``always:<tier>``; None: routed."""
        if model in self._chat.tiers.tiers:
            return model
        return router.always_tier(strategy) if strategy else None

    def _resolve(self, model: str, endpoint: str) -> tuple[str, str]:
        """The tier or router a name stands for; a model of another endpoint is OpenAI's error for it."""
        try:
            return self._chat.tiers.resolve(model)
        except ModelNotFound as exc:
            raise self._catalogue.misplaced(model, endpoint) or exc from None

    async def _prepare_media(
        self, call: Call, request: ChatCompletionRequest
    ) -> tuple[ChatCompletionRequest, router.MediaSummary]:
        """Preprocess the request's media, once the cheap checks passed (the key, the model, the
        request and part counts); then the seconds they measured are charged to the tenant's limits."""
        if self._media is None or not has_media(request):
            return request, router.NO_MEDIA
        prepared = await self._media.prepare(request)
        call.demand = demand_of(request, prepared.summary)
        seconds = dataclasses.replace(
            call.demand, images=0, audio=0, video=0, request=False
        )  # the parts were counted at admission
        if seconds.video_seconds or seconds.audio_seconds:
            await self._front.admit(call, seconds)
        return prepared.request, prepared.summary
