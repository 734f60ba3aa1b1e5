"""Every endpoint's way in, the same for each: the key, the tenant's policy, the ledger's call, the
tenant's limits, its residency rules.

Chat Completions, the Responses API, legacy completions and Anthropic's Messages API
(gateway/pipeline/chat.py), embeddings (gateway/pipeline/endpoints/embeddings/stages.py) and speech to
text (gateway/pipeline/endpoints/speech.py) each call these in this order, so a rule a tenant sets
holds on every endpoint by construction, and an endpoint added later takes the same front:

     1 authenticate   the API key → the caller; an admin key may not call a model      caller()
     2 parse          the endpoint's own (OpenAI's shape, strictly)
       the call       the request as the ledger will see it; its cost tags             begin()
     3 limit          the key's own: its models (404), its budget, its per-minute      admit()
                      limits (429); then the tenant's per-minute limits → 429 + Retry-After
       tiers          a key's tiers: one pinned outside them is a 403; routed requests   tier_allowed()
                      land only on them (gateway/pipeline/plan.py filters the candidates)
       residency      the tenant's rules on the request's text: a ``refuse`` is a 400  residency()
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

import router
from gateway.accounts.budgets import KeyBudgets
from gateway.accounts.policies import PolicyBook
from gateway.accounts.tenants import Authenticator, Caller, Demand, RateLimiter, key_scope
from gateway.errors import InvalidRequest, ModelNotAllowed, ModelNotFound, PermissionDenied
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.record import Call, Recorder
from gateway.residency import NOTHING, Rule, Verdict, compiled, scan
from gateway.wire.chat import ChatCompletionRequest, parse_chat_request
from gateway.wire.decoding import decoded

# Stage 2 for one endpoint: its request body, for a known tenant, as the chat request the stages
# take. Chat Completions' is a plain decode; the Responses API reads the tenant's stored conversation
# (previous_response_id), so it needs the tenant.
Parse = Callable[[bytes, str], Awaitable[ChatCompletionRequest]]


async def parse_chat(body: bytes, tenant: str) -> ChatCompletionRequest:
    return await decoded(parse_chat_request, body)


@dataclass(frozen=True, slots=True)
class Deferred:
    """A request run later for a client that is not waiting for it (a batch line): its caller, known
    since the batch was made (its key read again, so a key revoked since refuses it), and the share
    of the live price its ledger row costs.  Its row's id comes from its request id, so a line run
    twice (its gateway killed between the answer and the line's mark) is billed once."""

    caller: Caller
    price_factor: float = 1.0


@dataclass(frozen=True, slots=True)
class Incoming:
    """A request as the HTTP face hands it over: Chat Completions', or another endpoint's with the
    translation to it (``parse``)."""

    headers: Mapping[str, str]  # the few the pipeline reads, lower-case names
    body: Callable[[], Awaitable[bytes]]  # reads the body (bounded); called once the caller is known
    request_id: str
    # Told the tenant and the model as soon as they are known (metric labels, the log context).
    noted: Callable[[str, str], None] = lambda tenant, model: None
    parse: Parse = parse_chat
    raw_prompt: bool = False  # legacy completions: the one user turn is the prompt (no chat template)
    # The API it came by, for the ledger: chat, responses, completions, embeddings, messages,
    # messages.count_tokens.
    endpoint: str = "chat"
    # Prompt-cache breakpoints the request marked (Anthropic's cache_control on /v1/messages), filled
    # by ``parse``; they reach the generation (tiers.Generation.cache_marks).
    cache_marks: list[dict[str, Any]] = field(default_factory=list)
    deferred: Deferred | None = None  # a batch line's (gateway/api/batches/runner.py)


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


class Front:
    def __init__(
        self,
        auth: Authenticator,
        policies: PolicyBook,
        limiter: RateLimiter,
        recorder: Recorder,
        tracing: Tracing,
        metrics: Metrics,
        key_budgets: KeyBudgets | None = None,
    ) -> None:
        """``key_budgets``: keys' own budgets (none: keys with a budget are refused nothing for it;
        the gateway always passes one)."""
        self.policies = policies
        self._key_budgets = key_budgets
        self._auth = auth
        self._limiter = limiter
        self._recorder = recorder
        self._tracing = tracing
        self._metrics = metrics
        self._rules = RuleBook()

    async def caller(self, incoming: Incoming) -> Caller:
        """1 authenticate: the key's caller, a tenant's (before any of a tenant's data is read)."""
        if incoming.deferred is not None:  # a batch line: its batch's key, read again
            return incoming.deferred.caller
        with self._tracing.span("auth"):
            caller = await self._auth.caller(incoming.headers)
        if caller.tenant is None:
            raise PermissionDenied(f"admin keys manage tenants; call {incoming.endpoint} with a tenant's key")
        return caller

    def begin(
        self, caller: Caller, incoming: Incoming, model: str, request: ChatCompletionRequest | None = None
    ) -> Call:
        """The request as the ledger will see it, with its cost tags (a malformed X-Tiergate-Tags: 400).
        ``request``: a chat request (its metadata and media parts count); None for another endpoint's."""
        tags = incoming.headers.get("x-tiergate-tags")
        if request is not None:
            call = self._recorder.begin(caller, request, incoming.request_id, tags, incoming.endpoint)
        else:
            call = self._recorder.begin_other(caller, model, incoming.request_id, incoming.endpoint, tags)
        if incoming.deferred is not None:
            call.price_factor, call.deferred = incoming.deferred.price_factor, True
        return call

    async def admit(self, call: Call, demand: Demand | None = None) -> None:
        """3 limit: the key's own limits, then the tenant's per-minute limits (``demand``: what it asks
        beyond the call's own).  A model the key may not use is OpenAI's 404 for a model the key
        cannot see.  The key is counted before its tenant: a request its tenant then refuses has
        used one of the key's (never the other way round)."""
        demand = call.demand if demand is None else demand
        caller = call.caller
        with self._tracing.span("rate_limit"):
            if demand.request:
                if not caller.limits.allows_model(call.model_asked):
                    raise ModelNotFound(
                        f"The model `{call.model_asked[:256]}` does not exist or you do not have access "
                        "to it.",
                        param="model",
                    )
                if self._key_budgets is not None:
                    await self._key_budgets.check(caller)
            scope = key_scope(caller.key_id, caller.limits)
            if scope is not None:
                await self._limiter.admit(scope, Demand(request=demand.request))
            await self._limiter.admit(call.tenant, demand)

    def tier_allowed(self, call: Call, tier: str | None) -> None:
        """A request pinned to ``tier`` (None: routed) by a key that may not use it: OpenAI's 403 for a
        model a project key is restricted from."""
        if tier is not None and not call.caller.limits.allows_tier(tier):
            raise ModelNotAllowed.for_key(call.caller.key_id, tier, call.caller.limits.tiers)

    def residency(self, call: Call, messages: list[dict[str, Any]], param: str) -> Verdict:
        """What the tenant's residency rules find in the request's text (``messages``: OpenAI's
        message dicts; another endpoint's texts as user turns).  The live view counts the rules that
        matched, refused requests too; a ``refuse`` is a 400 naming ``param``."""
        rules = self._rules.of(self.policies.policy(call.tenant.name).residency)
        if not rules:
            return NOTHING
        with self._tracing.span("residency"):
            verdict = scan(messages, rules)
        call.residency = verdict.fired
        for label, action in verdict.fired:
            self._metrics.residency.labels(label, action).inc()
        if refused := verdict.first("refuse"):
            raise InvalidRequest(
                f"this request contains data that residency rule {refused!r} does not allow to be sent",
                param=param,
                code="residency_refused",
            )
        return verdict

    def rules(self, tenant: str) -> tuple[Rule, ...]:
        return self._rules.of(self.policies.policy(tenant).residency)
