"""The chat service: route a validated request to a tier, fail over before the first byte.

Controllers call :meth:`ChatService.complete` or :meth:`ChatService.stream`;
both return the tier that served and why, so the controller can put them in
the response headers.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

import router
from gateway.errors import ModelNotFound, to_gateway_error
from gateway.metrics import Metrics
from gateway.protocol import (
    AudioPart,
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    ImagePart,
    ModelCard,
    ModelList,
    ResponseMessage,
    TextPart,
    UsageBody,
    VideoPart,
)
from gateway.sse import ChunkWriter
from tiers import Completion, Delta, Generation, Modality, Tier, TierUnavailable, Usage

AUTO_MODEL = "tiergate-auto"
_PART_MODALITY = {ImagePart: Modality.IMAGE, AudioPart: Modality.AUDIO, VideoPart: Modality.VIDEO}


@dataclass(frozen=True, slots=True)
class Routed:
    tier: str
    reason: str


@dataclass(slots=True)
class StreamOutcome:
    """Filled in while a stream runs: the model answering and, once it ends, its usage."""

    model: str = ""
    usage: Usage | None = None


@dataclass(frozen=True, slots=True)
class StreamStart:
    routed: Routed
    events: AsyncIterator[bytes]
    outcome: StreamOutcome = field(default_factory=StreamOutcome)


def features_of(request: ChatCompletionRequest) -> router.Features:
    chars = 0
    modalities = {Modality.TEXT}
    for message in request.messages:
        if isinstance(message.content, str):
            chars += len(message.content)
        elif message.content:
            for part in message.content:
                if isinstance(part, TextPart):
                    chars += len(part.text)
                else:
                    modalities.add(_PART_MODALITY[type(part)])
    return router.Features.estimate(
        text_chars=chars,
        turns=len(request.messages),
        max_tokens=request.output_limit,
        modalities=frozenset(modalities),
        stream=request.stream,
    )


def generation_of(request: ChatCompletionRequest, request_id: str) -> Generation:
    return Generation(
        messages=msgspec.to_builtins(request.messages),
        max_tokens=request.output_limit,
        temperature=request.temperature,
        top_p=request.top_p,
        stop=request.stop_list,
        seed=request.seed,
        presence_penalty=request.presence_penalty,
        frequency_penalty=request.frequency_penalty,
        request_id=request_id,
    )


class ChatService:
    def __init__(self, tiers: Mapping[str, Tier], rule: router.AutoRule, metrics: Metrics) -> None:
        self._tiers = dict(tiers)
        self._rule = rule
        self._metrics = metrics
        self._created = int(time.time())

    @property
    def model_names(self) -> list[str]:
        return [AUTO_MODEL, *self._tiers]

    def models(self) -> ModelList:
        return ModelList([ModelCard(name, self._created) for name in self.model_names])

    def tier_states(self) -> list[dict[str, Any]]:
        return [tier.state().as_dict() for tier in self._tiers.values()]

    def _route(self, request: ChatCompletionRequest) -> router.Decision:
        if request.model not in self.model_names:
            raise ModelNotFound(
                f"the model {request.model!r} does not exist; use one of: {', '.join(self.model_names)}",
                param="model",
            )
        views = [router.TierView(n, t.capabilities, t.state()) for n, t in self._tiers.items()]
        try:
            return router.decide(request.model, self._rule, views, features_of(request))
        except router.NoTierAvailable as exc:
            raise to_gateway_error(exc) from exc

    async def complete(
        self, request: ChatCompletionRequest, request_id: str
    ) -> tuple[Routed, ChatCompletion]:
        decision = self._route(request)
        gen = generation_of(request, request_id)
        last: Exception | None = None
        for name in (decision.tier, *decision.fallbacks):
            started = time.perf_counter()
            try:
                result = await self._tiers[name].complete(gen)
            except TierUnavailable as exc:
                self._metrics.failovers.labels(name).inc()
                last = exc
                continue
            self._metrics.latency.labels(name).observe(time.perf_counter() - started)
            reason = decision.reason if name == decision.tier else f"{name}: {last}, failed over"
            return Routed(name, reason), self._body(request_id, result)
        assert last is not None
        raise to_gateway_error(last) from last

    async def stream(self, request: ChatCompletionRequest, request_id: str) -> StreamStart:
        """Start streaming: the first delta is awaited here, so failures before it can fail over
        or become a proper HTTP error."""
        decision = self._route(request)
        gen = generation_of(request, request_id)
        last: Exception | None = None
        for name in (decision.tier, *decision.fallbacks):
            tier = self._tiers[name]
            started = time.perf_counter()
            deltas = tier.stream(gen)
            try:
                first = await anext(deltas)
            except TierUnavailable as exc:
                await deltas.aclose()
                self._metrics.failovers.labels(name).inc()
                last = exc
                continue
            except BaseException:
                await deltas.aclose()
                raise
            self._metrics.ttft.labels(name).observe(time.perf_counter() - started)
            writer = ChunkWriter(
                f"chatcmpl-{request_id}",
                int(time.time()),
                tier.capabilities.model,
                include_usage=request.include_usage,
            )
            reason = decision.reason if name == decision.tier else f"{name}: {last}, failed over"
            outcome = StreamOutcome(tier.capabilities.model, first.usage)
            events = writer.events(first, _usage_into(outcome, deltas))
            return StreamStart(Routed(name, reason), _closing(events, deltas), outcome)
        assert last is not None
        raise to_gateway_error(last) from last

    @staticmethod
    def _body(request_id: str, result: Completion) -> ChatCompletion:
        usage = result.usage
        return ChatCompletion(
            id=f"chatcmpl-{request_id}",
            created=int(time.time()),
            model=result.model,
            choices=[Choice(0, ResponseMessage(result.text), result.finish_reason)],
            usage=UsageBody(usage.prompt_tokens, usage.completion_tokens, usage.total_tokens),
        )


async def _closing(events: AsyncIterator[bytes], deltas: AsyncIterator[Delta]) -> AsyncIterator[bytes]:
    """Pass ``events`` through; however it ends (client gone included), close the tier's stream."""
    try:
        async for event in events:
            yield event
    finally:
        with contextlib.suppress(Exception):
            await deltas.aclose()  # type: ignore[attr-defined]


async def _usage_into(outcome: StreamOutcome, deltas: AsyncIterator[Delta]) -> AsyncIterator[Delta]:
    async for delta in deltas:
        if delta.usage is not None:
            outcome.usage = delta.usage
        yield delta


def new_request_id() -> str:
    return uuid.uuid4().hex
