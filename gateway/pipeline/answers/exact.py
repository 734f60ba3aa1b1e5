"""The result cache's policy: what may be cached, for whom, and what a lookup says.

The stores in ``cache/`` keep bytes; this module decides.  A request is looked
up when caching is on and it is deterministic (temperature 0, or a seed given;
``cache.only_deterministic = false`` lifts that).  ``Cache-Control: no-cache``
skips the lookup but stores the fresh answer; ``no-store`` does neither.  A
backend that fails is a miss and a logged warning, never a failed request.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import time
from dataclasses import dataclass

import msgspec

import cache
from gateway.ops.metrics import Metrics
from gateway.wire.chat import ChatCompletionRequest
from tiers import Event, decode_events, encode_events

log = logging.getLogger(__name__)


class CacheStatus(enum.StrEnum):
    HIT = "hit"
    SEMANTIC = "semantic"  # a paraphrase's answer (gateway/pipeline/answers/semantic/)
    MISS = "miss"
    BYPASS = "bypass"


@dataclass(frozen=True, slots=True)
class Pending:
    """What the semantic cache adds to its index once the fresh answer is stored under ``answer_key``."""

    answer_key: str
    tenant: str
    context: str  # the digest of everything but the last user turn
    text: str  # the last user turn
    vector: bytes  # its embedding (float32)


@dataclass(frozen=True, slots=True)
class Lookup:
    status: CacheStatus
    key: str | None = None  # where to store the fresh answer; None: do not store
    answer: cache.CachedAnswer | None = None
    seconds: float = 0.0
    events: list[Event] | None = None  # the hit's events, to replay
    similarity: float | None = None  # a semantic hit's cosine similarity
    embed_s: float = 0.0  # time to embed the last user turn (the semantic cache)
    semantic: Pending | None = None  # a miss the semantic cache will index once answered


BYPASS = Lookup(CacheStatus.BYPASS)


def cache_directives(cache_control: str) -> set[str]:
    """The directives of a Cache-Control header, lower case (no-cache, no-store, ...)."""
    return {d.strip().lower() for d in cache_control.split(",") if d.strip()}


def deterministic(request: ChatCompletionRequest) -> bool:
    """Whether the request's answer is reproducible: temperature 0, or a seed given."""
    return request.temperature == 0 or request.seed is not None


class AnswerCache:
    def __init__(
        self, config: cache.CacheConfig, store: cache.ResultStore | None, rule: object, metrics: Metrics
    ) -> None:
        self._config = config
        self._store = store if config.enabled else None
        # The routing rule is part of every key: change the rule, and old answers are not served.
        self._rule = hashlib.sha256(msgspec.json.encode(rule)).hexdigest()[:16]
        self._metrics = metrics
        # Labelled children bound once (``labels()`` takes a lock on every call).
        self._counted = {s: metrics.cache_requests.labels(s.value) for s in CacheStatus}

    @property
    def enabled(self) -> bool:
        return self._store is not None

    def cacheable(self, request: ChatCompletionRequest) -> bool:
        return not self._config.only_deterministic or deterministic(request)

    def key(self, request: ChatCompletionRequest, tenant: str, tier_models: str) -> str:
        """Everything that shapes the answer: the messages (tool calls and results included), the
        sampling, the tools and tool choice, the response format, logprobs and n (not who asks, nor
        where the prompt's prefix is cached)."""
        params = msgspec.to_builtins(
            msgspec.structs.replace(
                request,
                messages=[],
                stream=False,
                stream_options=None,
                metadata=None,
                user=None,
                store=None,
                safety_identifier=None,
                prompt_cache_key=None,
                prompt_cache_retention=None,
                prompt_cache_options=None,
            )
        )
        params["max_tokens"] = request.output_limit
        params.pop("max_completion_tokens", None)
        messages = msgspec.to_builtins(request.messages)
        return cache.result_key(tenant, f"{self._rule}|{tier_models}", messages, params)

    async def lookup(
        self, request: ChatCompletionRequest, tenant: str, cache_control: str, tier_models: str
    ) -> Lookup:
        """The exact cache's answer, or why not; not counted (the caller counts the final status,
        the semantic cache may still answer)."""
        if self._store is None or not self.cacheable(request):
            return BYPASS
        directives = cache_directives(cache_control)
        if "no-store" in directives:
            return BYPASS
        key = self.key(request, tenant, tier_models)
        if "no-cache" in directives:
            return Lookup(CacheStatus.BYPASS, key)
        started = time.perf_counter()
        try:
            data = await self._store.get(key)
        except cache.CacheError as exc:
            log.warning("result cache read failed, serving as a miss: %s", exc)
            self._metrics.cache_errors.labels("get").inc()
            data = None
        seconds = time.perf_counter() - started
        self._metrics.cache_lookup.observe(seconds)
        answer = cache.decode_answer(data) if data is not None else None
        events = replay(answer) if answer is not None else None
        if events is None:
            return Lookup(CacheStatus.MISS, key, None, seconds)
        return Lookup(CacheStatus.HIT, key, answer, seconds, events)

    async def store(self, key: str, answer: cache.CachedAnswer) -> None:
        if self._store is None:
            return
        data = cache.encode_answer(answer)
        if len(data) > self._config.max_entry_bytes:
            return
        try:
            await self._store.set(key, data, self._config.ttl_s)
        except cache.CacheError as exc:
            log.warning("result cache write failed: %s", exc)
            self._metrics.cache_errors.labels("set").inc()

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.aclose()

    def count(self, lookup: Lookup) -> Lookup:
        """Count one request's lookup in tiergate_cache_requests, by its final status."""
        self._counted[lookup.status].inc()
        return lookup


def answer_of(events: list[Event], model: str, tier: str) -> cache.CachedAnswer:
    """What the cache keeps of an answer: its events after :class:`~tiers.Started`."""
    return cache.CachedAnswer(encode_events(events), model, tier)


def replay(answer: cache.CachedAnswer) -> list[Event] | None:
    """A cached answer's events, as it was first streamed; None when they are unreadable."""
    try:
        return decode_events(answer.events)
    except msgspec.DecodeError:
        return None
