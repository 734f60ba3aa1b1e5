"""The one port the request path asks for stored answers and hands fresh ones to: the exact result
cache (gateway/pipeline/answers/exact.py), and behind it, when a tenant's policy turns it on, the semantic
cache (gateway/pipeline/answers/semantic/), which may answer a paraphrase of a stored request.

Nothing else on the path knows there are two: the chat service looks up, the ending keeps.
"""

from __future__ import annotations

import router
from gateway.ops.tracing import Tracing
from gateway.pipeline.answers.exact import BYPASS, AnswerCache, Lookup, answer_of, cache_directives
from gateway.pipeline.answers.semantic import Asked, SemanticCache
from gateway.wire.chat import ChatCompletionRequest
from tiers import Event


class Answers:
    def __init__(self, exact: AnswerCache | None, semantic: SemanticCache | None, tracing: Tracing) -> None:
        self._exact = exact
        self._semantic = semantic
        self._tracing = tracing

    async def lookup(
        self,
        request: ChatCompletionRequest,
        tenant: str,
        cache_control: str,
        tier_models: str,
        semantic: router.SemanticCachePolicy,
    ) -> Lookup:
        """A stored answer to replay, or where the fresh one will be kept (counted by final status)."""
        exact = self._exact
        if exact is None:
            return BYPASS
        with self._tracing.span("cache.lookup") as span:
            lookup = await exact.lookup(request, tenant, cache_control, tier_models)
            if self._semantic is not None and semantic.enabled:
                asked = Asked(
                    request,
                    tenant,
                    semantic,
                    cache_directives(cache_control),
                    lambda r: exact.key(r, tenant, tier_models),
                )
                lookup = await self._semantic.lookup(asked, lookup)
            if span is not None:
                span.set_attribute("tiergate.cache", lookup.status.value)
        return exact.count(lookup)

    async def keep(self, lookup: Lookup, events: list[Event], model: str, tier: str) -> None:
        """A complete fresh answer, stored where ``lookup`` said; then the semantic index learns it
        (before its last event goes out, so a repeat right after finds it)."""
        if self._exact is None or lookup.key is None:
            return
        await self._exact.store(lookup.key, answer_of(events, model, tier))
        if lookup.semantic is not None and self._semantic is not None:
            await self._semantic.add(lookup.semantic)

    async def aclose(self) -> None:
        if self._exact is not None:
            await self._exact.aclose()
