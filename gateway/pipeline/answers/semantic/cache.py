"""The semantic cache: behind the exact one, a paraphrase of a stored request gets its answer.

Asked only when the tenant's policy turns it on (``semantic_cache.enabled``) and the exact cache
missed.  The request's last user turn is embedded by the in-process MiniLM tier (batched with every
other caller's); the index (cache/_semantic.py) gives the tenant's nearest stored turns of the same
context (gateway/pipeline/answers/semantic/context.py); the most similar one at or above the policy's
threshold that the near-miss guard lets through (guard.py, with WordNet's judge of a swapped word,
judge.py, when the build cache has it) answers, its answer read from the result
store under its exact key and replayed like an exact hit.  A miss carries its embedding on, so the
fresh answer is added to the index after the exact store, with the exact cache's time to live.
``Cache-Control: no-cache`` embeds (to store) but does not look up; ``no-store`` does neither.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

import cache
import router
from gateway.pipeline.answers.exact import CacheStatus, Lookup, Pending, replay
from gateway.pipeline.answers.semantic.context import last_text, skipped, without_last_text
from gateway.pipeline.answers.semantic.guard import agree, terms
from gateway.pipeline.answers.semantic.judge import Judge, judge_in
from gateway.pipeline.answers.semantic.keeper import DiskKeeper, FeedKeeper
from gateway.wire.chat import ChatCompletionRequest
from tiers import Event, TierError
from tiers.embedding import Embedder, Vectors

log = logging.getLogger(__name__)
KeyOf = Callable[[ChatCompletionRequest], str]


class Keeper(Protocol):
    async def start(self) -> None: ...

    async def added(self, entry: cache.Entry) -> None: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Asked:
    """One request as the semantic cache sees it."""

    request: ChatCompletionRequest
    tenant: str
    policy: router.SemanticCachePolicy
    directives: set[str]  # of its Cache-Control header
    key_of: KeyOf  # the exact cache's key of a request (tenant, rule and served models bound)


def semantic_cache(
    config: cache.CacheConfig,
    store: cache.ResultStore | None,
    embedder: Embedder | None,
    data_path: Path,
    build_cache_dir: str | Path,
    redis: cache.RedisPolicy | None = None,
) -> SemanticCache | None:
    """The semantic cache, when there is a result store and an embedding model to make it from
    (tenants' policies then say who uses it); WordNet is looked for in ``build_cache_dir``; the Redis
    backend's feed connects as ``redis`` says."""
    if store is None or embedder is None or not embedder.available:
        return None
    return SemanticCache(config, store, embedder, data_path, build_cache_dir, redis)


class SemanticCache:
    def __init__(
        self,
        config: cache.CacheConfig,
        store: cache.ResultStore,
        embedder: Embedder,
        data_path: Path,
        build_cache_dir: str | Path,
        redis: cache.RedisPolicy | None = None,
    ) -> None:
        semantic = config.semantic
        self._build_cache_dir = build_cache_dir
        self.judge: Judge | None = None
        self._store = store
        self._embedder = embedder
        self._ttl_s = config.ttl_s
        self.index = cache.SemanticIndex(
            embedder.dimensions,
            max_entries=semantic.max_entries,
            max_per_tenant=semantic.max_entries_per_tenant,
            candidates=semantic.candidates,
        )
        self._keeper: Keeper
        if config.backend == "redis":
            feed = cache.SemanticFeed(
                config.redis_url,
                semantic.redis_stream,
                max_len=semantic.max_entries,
                timeout_s=config.redis_timeout_s,
                policy=redis,
            )
            self._keeper = FeedKeeper(self.index, feed)
        else:
            path = data_path / "cache" / "semantic" / "index.msgpack"
            self._keeper = DiskKeeper(self.index, path, semantic.save_interval_s)

    async def start(self) -> None:
        # Opened once per process (the files are mapped, not read: milliseconds), logged once either way.
        self.judge = await asyncio.to_thread(judge_in, self._build_cache_dir)
        await self._keeper.start()

    async def aclose(self) -> None:
        await self._keeper.aclose()

    async def lookup(self, asked: Asked, exact: Lookup) -> Lookup:
        """A semantic hit, or ``exact`` with what the fresh answer needs to be added to the index."""
        request = asked.request
        if exact.status is CacheStatus.HIT or "no-store" in asked.directives:
            return exact
        if skipped(request, asked.policy) is not None:
            return exact
        text = last_text(request)
        started = time.perf_counter()
        vector = await self._embedding(text)
        embed_s = time.perf_counter() - started
        if vector is None:
            return exact
        context = asked.key_of(without_last_text(request))
        pending = Pending(exact.key or asked.key_of(request), asked.tenant, context, text, vector.tobytes())
        missed = dataclasses.replace(exact, key=pending.answer_key, semantic=pending, embed_s=embed_s)
        if "no-cache" in asked.directives:
            return missed
        searched = time.perf_counter()
        asking = terms(text)
        for entry, similarity in self.index.search(asked.tenant, context, vector):
            if similarity < asked.policy.threshold or not agree(terms(entry.text), asking, self.judge):
                continue
            hit = await self._answer(entry)
            if hit is not None:
                seconds = exact.seconds + time.perf_counter() - searched
                return Lookup(CacheStatus.SEMANTIC, None, hit[0], seconds, hit[1], similarity, embed_s)
        return missed

    async def add(self, pending: Pending) -> None:
        """Index a fresh answer, stored under ``pending.answer_key`` a moment ago."""
        entry = cache.Entry(
            pending.answer_key,
            pending.tenant,
            pending.context,
            pending.text,
            time.time() + self._ttl_s,
            pending.vector,
        )
        if self.index.add_wire(entry):
            await self._keeper.added(entry)

    async def _embedding(self, text: str) -> Vectors | None:
        """The turn's unit vector; None when it cannot be had (no text, too long, the model away)."""
        if not text or not self._embedder.available:
            return None
        try:
            await self._embedder.loaded()
            rows = self._embedder.tokenize([text])
            if len(rows[0]) > self._embedder.max_tokens:
                return None  # a long turn: answered fresh (the model would see only its start)
            return np.asarray((await self._embedder.embed(rows))[0], dtype=np.float32)
        except TierError as exc:
            log.warning("semantic cache: no embedding, served as a miss: %s", exc)
            return None

    async def _answer(self, entry: cache.Entry) -> tuple[cache.CachedAnswer, list[Event]] | None:
        try:
            data = await self._store.get(entry.answer_key)
        except cache.CacheError as exc:
            log.warning("semantic cache: result store read failed, served as a miss: %s", exc)
            return None
        answer = cache.decode_answer(data) if data is not None else None
        events = replay(answer) if answer is not None else None
        if answer is None or events is None:
            self.index.remove(entry.answer_key)  # its answer expired or was evicted
            return None
        return answer, events
