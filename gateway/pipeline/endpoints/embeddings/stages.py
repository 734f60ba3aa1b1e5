"""The path of one embeddings request (``POST /v1/embeddings``): the chat pipeline's stages, in its order
(gateway/pipeline/chat.py), through the same front (gateway/pipeline/front.py: the key, the tenant's
policy, limits and residency rules) and the same ending (gateway/pipeline/ending.py).

     1 authenticate   the API key → the caller and its tenant        Authenticator
     2 parse          OpenAI's request, strictly                      gateway/wire/embeddings.py
       model          the embedding model's name or an alias, else 404; dimensions, input count: 400
     3 limit          the tenant's request limit (its tokens are charged at 10, as for chat)
       residency      the tenant's rules on the inputs' text, as for chat (gateway/pipeline/front.py)
       tokenize       token ids (OpenAI's cl100k_base) → text; texts → the model's token ids;
                      an empty or too long input: 400
     5 cache          per input, by tenant + model + token ids: a batch computes only its misses
                      (and a text repeated inside one request once); Cache-Control as for chat
     8 dispatch       the misses to the embedding tier, batched with every other request's
     9 frame          floats or base64 (the caller writes the response)
    10 record         tokens charged, one ledger row (endpoint "embeddings") on disk before the answer

A ledger row is priced like a chat row: tokens × the ``embedding`` tier's prompt price; an answer whose
every input came from the cache costs nothing (as a chat cache hit does); a partly cached one is priced
in full.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import cache
from gateway.accounts.tenants import Demand
from gateway.errors import InvalidRequest, ModelNotFound
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Tracing
from gateway.pipeline.answer import Routed
from gateway.pipeline.answers.exact import CacheStatus, cache_directives
from gateway.pipeline.ending import Ending
from gateway.pipeline.endpoints.embeddings import openai_tokens
from gateway.pipeline.front import Front, Incoming
from gateway.pipeline.record import Call
from gateway.pipeline.tierset import Catalogue
from gateway.residency import Redaction, Verdict
from gateway.wire.decoding import decoded
from gateway.wire.embeddings import (
    EmbeddingRequest,
    encode_embeddings,
    inputs_of,
    parse_embedding_request,
)
from tiers import Usage
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, Embedder, EmbeddingConfig, Vectors

log = logging.getLogger(__name__)
ENDPOINT = "/v1/embeddings"


def embedding_config(config: EmbeddingConfig, build_cache_dir: str) -> EmbeddingConfig:
    """``config`` with an empty model folder filled from the build cache."""
    import msgspec

    folder = config.model_dir or str(Path(build_cache_dir).expanduser() / DEFAULT_EMBEDDING_MODEL_DIR)
    return msgspec.structs.replace(config, model_dir=folder)


async def _texts(inputs: list[str] | list[list[int]]) -> list[str]:
    """The inputs' texts: token ids are OpenAI's (cl100k_base), read back to the text they stand for."""
    if inputs and isinstance(inputs[0], str):
        return [i for i in inputs if isinstance(i, str)]
    return await openai_tokens.texts_of([i for i in inputs if isinstance(i, list)])


@dataclass(frozen=True, slots=True)
class EmbeddingAnswer:
    body: bytes  # the JSON answer
    routed: Routed  # what its X-Tiergate-* headers say


@dataclass(frozen=True, slots=True)
class _Lookup:
    vectors: Vectors
    hits: int
    status: CacheStatus
    seconds: float


class EmbeddingPipeline:
    def __init__(
        self,
        embedder: Embedder,
        front: Front,
        ending: Ending,
        tracing: Tracing,
        metrics: Metrics,
        store: cache.ResultStore | None = None,
        ttl_s: float = cache.CacheConfig().ttl_s,
        catalogue: Catalogue | None = None,
    ) -> None:
        """``catalogue``: the other endpoints' models, named in the error for one of them named here."""
        self._catalogue = catalogue or Catalogue()
        self.embedder = embedder
        self._names = frozenset({embedder.model, *embedder.config.aliases})
        self._front = front
        self._ending = ending
        self._tracing = tracing
        # Vectors are stored in batches, a moment later: one write for many requests (cache/_buffered.py).
        self._store = cache.BufferedWrites(store) if store is not None else None
        self._ttl_s = ttl_s
        self._counted = {r: metrics.embedding_inputs.labels(r) for r in ("hit", "miss")}

    @property
    def model_names(self) -> list[str]:
        """What ``model`` may name (none when the model is not built)."""
        return sorted(self._names) if self.embedder.available else []

    async def run(self, incoming: Incoming) -> EmbeddingAnswer:
        started = time.perf_counter()
        caller = await self._front.caller(incoming)  # 1 authenticate
        request = await decoded(parse_embedding_request, await incoming.body())  # 2 parse
        inputs = inputs_of(request)
        call = self._front.begin(caller, incoming, request.model)  # the ledger's; its cost tags
        incoming.noted(call.tenant.name, request.model)
        try:
            self._check(request, len(inputs))  # the model: 404; dimensions and the input count: 400
            await self._front.admit(call, Demand())  # 3 limit
            await self.embedder.loaded()  # the first request loads the model (embedding.preload = false)
            items = await _texts(inputs)
            items = self._residency(call, items)  # the tenant's rules, on the texts
            rows = await self._tokens(items)
            headers = incoming.headers
            use_cache = self._front.policies.policy(call.tenant.name).cache
            found = await self._vectors(rows, call.tenant.name, headers.get("cache-control", ""), use_cache)
        except BaseException as exc:  # refused, or its client left (gateway/api/door.py)
            self._ending.refused(call, exc)
            raise
        tokens = sum(map(len, rows))
        routed = Routed(
            self.embedder.name,
            "embeddings" + Verdict(call.residency).note,  # the residency rules that fired
            found.status,
            (),
            time.perf_counter() - started,
            found.seconds,
        )
        await self._ending.completed(call, routed, self.embedder.model, Usage(tokens, 0))  # 10 the ending
        body = encode_embeddings(found.vectors, self.embedder.model, tokens, request.encoding_format)
        return EmbeddingAnswer(body, routed)

    def _residency(self, call: Call, texts: list[str]) -> list[str]:
        """The tenant's residency rules on the inputs' text.
        ``refuse``: 400.  The in-process model is local; vLLM pooling servers are remote: for them
        ``keep_local`` is a 400 (no local embedding tier can take it) and ``redact`` embeds the text
        with placeholders where the rules matched."""
        if not self._front.rules(call.tenant.name):
            return texts
        verdict = self._front.residency(call, [{"role": "user", "content": t} for t in texts], "input")
        if self.embedder.local or not verdict.fired:
            return texts
        if kept := verdict.first("keep_local"):
            raise InvalidRequest(
                f"residency rule {kept!r} keeps this request on local tiers, and the embedding model "
                f"here runs on remote servers ({self.embedder.name})",
                param="input",
                code="residency_refused",
            )
        if not verdict.redact:
            return texts
        redaction = Redaction()
        return [redaction.text(t, verdict.redact) for t in texts]

    def _check(self, request: EmbeddingRequest, count: int) -> None:
        if request.model not in self.model_names:
            if misplaced := self._catalogue.misplaced(request.model, "embeddings"):
                raise misplaced
            shown = ", ".join(self.model_names) or "none (the embedding model is not built: scripts/setup.sh)"
            raise ModelNotFound(
                f"The model `{request.model[:256]}` does not exist for {ENDPOINT}; use one of: {shown}",
                param="model",
            )
        dims = self.embedder.dimensions
        if request.dimensions is not None and request.dimensions != dims:
            raise InvalidRequest(
                f"{self.embedder.model} makes {dims}-dimensional vectors and cannot be shortened "
                f"(dimensions = {request.dimensions}); leave dimensions out or send {dims}",
                param="dimensions",
            )
        most = self.embedder.config.max_inputs
        if count > most:
            raise InvalidRequest(f"'input' has {count} items; at most {most} per request", param="input")

    async def _tokens(self, texts: list[str]) -> list[list[int]]:
        with self._tracing.span("tokenize"):
            # A long list would hold the event loop for milliseconds: tokenized beside it.
            if len(texts) > 32:
                rows = await asyncio.to_thread(self.embedder.tokenize, texts)
            else:
                rows = self.embedder.tokenize(texts)
            self.embedder.check(rows)
        return rows

    async def _vectors(self, rows: list[list[int]], tenant: str, cache_control: str, use: bool) -> _Lookup:
        """5 cache, 8 dispatch: stored vectors; the others computed (each distinct row once), then stored."""
        directives = cache_directives(cache_control)
        store = self._store if use and "no-store" not in directives else None
        out = np.empty((len(rows), self.embedder.dimensions), dtype=np.float32)
        keys = [cache.embedding_key(tenant, self.embedder.model, r) for r in rows] if store else []
        cache_s, hits = 0.0, [False] * len(rows)
        if store is not None and "no-cache" not in directives:
            started = time.perf_counter()
            distinct_keys = list(dict.fromkeys(keys))
            found = dict(zip(distinct_keys, await self._get_many(store, distinct_keys), strict=True))
            for i, key in enumerate(keys):
                value = found[key]
                if value is not None:
                    out[i], hits[i] = value, True
            cache_s = time.perf_counter() - started
        misses = [i for i, hit in enumerate(hits) if not hit]
        if misses:
            distinct: dict[tuple[int, ...], list[int]] = {}
            for i in misses:
                distinct.setdefault(tuple(rows[i]), []).append(i)
            with self._tracing.span("embed"):
                computed = await self.embedder.embed([list(r) for r in distinct])  # 8 dispatch
            for vector, where in zip(computed, distinct.values(), strict=True):
                out[where] = vector
            if store is not None:
                await self._set_many(
                    store, [(keys[w[0]], v) for v, w in zip(computed, distinct.values(), strict=True)]
                )
        n_hits = len(rows) - len(misses)
        self._counted["hit"].inc(n_hits)
        self._counted["miss"].inc(len(misses))
        if store is None or "no-cache" in directives:
            status = CacheStatus.BYPASS
        else:
            status = CacheStatus.HIT if not misses else CacheStatus.MISS
        return _Lookup(out, n_hits, status, cache_s)

    async def _get_many(self, store: cache.ResultStore, keys: list[str]) -> list[Vectors | None]:
        try:
            values = await store.get_many(keys)
        except cache.CacheError as exc:
            log.warning("embedding cache read failed (treated as misses): %s", exc)
            return [None] * len(keys)
        size = 4 * self.embedder.dimensions
        return [np.frombuffer(v, dtype="<f4") if v is not None and len(v) == size else None for v in values]

    async def _set_many(self, store: cache.ResultStore, entries: list[tuple[str, Vectors]]) -> None:
        """Fresh vectors stored; held in memory first, so this returns at once (no disk on the path)."""
        try:
            await store.set_many([(k, np.asarray(v, dtype="<f4").tobytes()) for k, v in entries], self._ttl_s)
        except cache.CacheError as exc:
            log.warning("embedding cache write failed: %s", exc)

    async def aclose(self) -> None:
        """Store the vectors still held (before the store under them closes)."""
        if self._store is not None:
            await self._store.aclose()
