"""Stage 6, plan: what the request needs (its features), where it goes (the router's decision), and
what it must lose first when a medium's path is broken on every tier that takes it (degradation)."""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec

import router
from gateway.errors import ModalityUnavailable, to_gateway_error
from gateway.media import engine_messages
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline import degrade
from gateway.pipeline.tierset import AUTO_MODEL, TierSet
from gateway.residency import NOTHING, Verdict
from gateway.wire.chat import AudioPart, ChatCompletionRequest, FramesPart, ImagePart, TextPart, VideoPart
from tiers import Ability, Generation, Modality

_PART_MODALITY = {
    ImagePart: Modality.IMAGE,
    AudioPart: Modality.AUDIO,
    VideoPart: Modality.VIDEO,
    FramesPart: Modality.VIDEO,
}
# The chat template's words around tool signatures (tiers/chat_templates/chatml-tools.jinja).
TOOLS_PREAMBLE_CHARS = 400
# Expected output when the client sets no max_tokens, for cost estimates only.
DEFAULT_OUTPUT_TOKENS = 256
# A prompt token costs about a tenth of a generated one: prefill is batched, decoding is token by
# token (SmolLM2 on this CPU: ~1,000 prompt tokens/s against ~30 generated tokens/s per sequence).
PROMPT_TOKEN_COST = 0.1
# How a decision is made: the learned router's (RoutingService.decide), or the size rule alone.
Decide = Callable[[Sequence[router.TierView], router.Features], router.Decision]
# How a request is routed without a learner (no RoutingService): the size rule alone.
RULE_ONLY = router.TenantPolicy(strategy="rule")


def features_of(
    request: ChatCompletionRequest,
    media: router.MediaSummary = router.NO_MEDIA,
    tenant: str = "",
    strategy: str = "",
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
        for call in message.tool_calls or ():
            chars += len(call.function.name) + len(call.function.arguments)
        if message.role == "user":
            last_user = text
    if request.tools:  # the chat template puts their signatures in the prompt
        chars += len(msgspec.json.encode(request.tools)) + TOOLS_PREAMBLE_CHARS
    return router.Features.estimate(
        text_chars=chars,
        turns=len(request.messages),
        max_tokens=request.output_limit,
        modalities=frozenset(modalities),
        stream=request.streamed,
        media=media,
        tenant=tenant,
        hour=time.gmtime().tm_hour,
        text=last_user,
        pinned=None if request.model == AUTO_MODEL else request.model,
        needs=abilities_needed(request),
        strategy=strategy or None,
    )


def _format_of(request: ChatCompletionRequest) -> dict[str, object] | None:
    """The response format as a tier takes it: None for plain text."""
    if request.response_format is None or request.format_type == "text":
        return None
    return msgspec.to_builtins(request.response_format)  # type: ignore[no-any-return]


def abilities_needed(request: ChatCompletionRequest) -> frozenset[Ability]:
    """What a tier must be able to do to honour ``request`` (beyond plain text)."""
    needed = set()
    if request.uses_tools:
        needed.add(Ability.TOOLS)
    if request.format_type != "text":
        needed.add(Ability(request.format_type))
    if request.logprobs:
        needed.add(Ability.LOGPROBS)
    if request.choices > 1:
        needed.add(Ability.CHOICES)
    if request.logit_bias:
        needed.add(Ability.LOGIT_BIAS)
    return frozenset(needed)


def conversation_key(request: ChatCompletionRequest, session_id: str | None) -> str:
    """The affinity key (cloud replica, edge instance): the client's ``prompt_cache_key`` (OpenAI's
    name for it), else its session id, else a hash of the conversation's opening (system + first
    user turn), which every later turn of the same conversation repeats."""
    if request.prompt_cache_key:
        return f"key:{request.prompt_cache_key}"
    if session_id:
        return session_id
    opening = msgspec.json.encode(request.messages[:2])
    return hashlib.blake2b(opening, digest_size=8).hexdigest()


@dataclass(frozen=True, slots=True)
class Plan:
    """A routed request: what will be sent (maybe degraded), where, and what it carries."""

    request: ChatCompletionRequest
    decision: router.Decision
    modalities: frozenset[Modality]
    degraded: tuple[str, ...]
    features: router.Features
    residency: Verdict = NOTHING  # what the tenant's residency rules found (redactions, the note)
    note: str = ""  # what happened before planning (audio transcribed), for the route reason

    @property
    def order(self) -> tuple[str, ...]:
        """The tiers to try, in order: the choice, then its fallbacks."""
        return (self.decision.tier, *self.decision.fallbacks)

    def generation(
        self, request_id: str, session_id: str | None, tenant: str, *, raw_prompt: bool = False
    ) -> Generation:
        """The request as every tier takes it; ``raw_prompt``: its one user turn is the prompt."""
        request, features = self.request, self.features
        prompt = request.messages[0].content if raw_prompt else None
        return Generation(
            prompt=prompt if isinstance(prompt, str) else None,
            messages=engine_messages(msgspec.to_builtins(request.messages)),
            max_tokens=request.output_limit,
            temperature=request.temperature,
            top_p=request.top_p,
            stop=request.stop_list,
            seed=request.seed,
            presence_penalty=request.presence_penalty,
            frequency_penalty=request.frequency_penalty,
            tools=[msgspec.to_builtins(t) for t in request.tools or ()],
            tool_choice=msgspec.to_builtins(request.tool_choice),
            parallel_tool_calls=request.parallel_tool_calls,
            response_format=_format_of(request),
            logprobs=bool(request.logprobs),
            top_logprobs=request.top_logprobs or 0,
            logit_bias=request.token_bias,
            n=request.choices,
            top_k=request.top_k,
            min_p=request.min_p,
            repetition_penalty=request.repetition_penalty,
            min_tokens=request.min_tokens or 0,
            ignore_eos=bool(request.ignore_eos),
            stop_token_ids=list(request.stop_token_ids or ()),
            reasoning_effort=request.reasoning_effort,
            prompt_cache_key=request.prompt_cache_key,
            request_id=request_id,
            cost=request.choices
            * (PROMPT_TOKEN_COST * features.prompt_tokens + (features.max_tokens or DEFAULT_OUTPUT_TOKENS)),
            affinity=conversation_key(request, session_id),
            tenant=tenant,
            stream=request.streamed,
        )

    def reason(self, served: str, last: Exception | None) -> router.Reason:
        """Why ``served`` answered: the decision's reason, or the failover from the tier before it."""
        reason = self.decision.reason
        return reason if served == self.decision.tier else reason.failed_over(served, str(last))


class Planner:
    def __init__(
        self,
        tiers: TierSet,
        metrics: Metrics,
        tracing: Tracing,
        *,
        decide: Decide | None = None,
        rule: router.AutoRule | None = None,
        fail_instead_of_degrade: bool = False,
    ) -> None:
        """``decide`` is the learned router's (``RoutingService.decide``); without one, the size rule."""
        self._tiers = tiers
        self._metrics = metrics
        self._tracing = tracing
        plain = router.Router(rule or router.AutoRule())
        self._decide = decide or (lambda views, features: plain.decide(features, views, RULE_ONLY))
        self._fail_instead_of_degrade = fail_instead_of_degrade

    def plan(
        self,
        request: ChatCompletionRequest,
        tenant: str,
        media: router.MediaSummary,
        fail_instead_of_degrade: bool | None,
        *,
        strategy: str = "",
        residency: Verdict = NOTHING,
        tags: Mapping[str, str] | None = None,
        degraded_before: tuple[str, ...] = (),
        note: str = "",
        allowed: tuple[str, ...] = (),
    ) -> Plan:
        """``degraded_before``, ``note``: what happened to the request before (its audio transcribed);
        ``allowed``: the only tiers its key may use (empty: all): the router's candidates, and so its
        choice and its fallbacks, are those alone."""
        views = self._tiers.views()
        if allowed:
            views = [v for v in views if v.name in allowed]
        kept_local = residency.first("keep_local")
        features = dataclasses.replace(
            features_of(request, media, tenant, strategy), kept_local=kept_local, tags=tags
        )
        lost = router.to_degrade(views, features)
        degraded: tuple[str, ...] = ()
        if lost:
            names = ", ".join(sorted(m.value for m in lost))
            fail = (
                self._fail_instead_of_degrade if fail_instead_of_degrade is None else fail_instead_of_degrade
            )
            if fail:
                raise ModalityUnavailable(
                    f"the {names} path is failing on every tier that accepts it (circuit breaker open) "
                    "and this gateway is set to fail instead of serving the request text-only; retry later"
                )
            request = degrade.without(request, lost)
            features = dataclasses.replace(
                features_of(request, degrade.summary_without(media, lost), tenant, strategy),
                kept_local=kept_local,
                tags=tags,
            )
            degraded = tuple(sorted(m.value for m in lost))
            for m in lost:
                self._metrics.degraded.labels(m.value).inc()
        try:
            with self._tracing.span("route"):
                decision = self._decide(views, features)
        except (router.NoTierAvailable, router.BudgetExhausted) as exc:
            raise to_gateway_error(exc) from exc
        self._metrics.route_decided(decision.strategy, decision.tier, decision.reason.kind.value)
        if lost:
            decision = dataclasses.replace(decision, reason=decision.reason.removing(lost))
        return Plan(
            request, decision, features.modalities, degraded_before + degraded, features, residency, note
        )
