"""Shadow comparisons: a sample of the answers a cheaper tier gave is asked again of a reference tier,
in the background, and the two answers compared; whether they agree is a quality label for the tier
that answered (router/_learning/quality.py).  Off unless a tenant's policy turns it on
(``shadow.enabled``, ``rate``, ``budget_usd`` per UTC day, ``reference``, ``threshold``).

    sampled     at the answer's start, with the policy's ``rate``, while the day's budget is not spent
    run         after the client's answer is complete, one shadow at a time gateway-wide, only while
                the reference tier queues nothing (the lowest priority: a client never waits for one)
    budget      before it runs, its worst case (the prompt, and every token of ``max_tokens``, at the
                reference tier's prices) must fit in what is left of the day's budget; its real cost
                is then charged to the budget: the shadows of a day never cost more than it
    compared    structured answers (a response_format) as JSON values, short ones (12 words or fewer)
                as their words, prose by the embedding model's cosine (>= ``threshold``) when the
                gateway runs one in process ([embedding] enabled), else by their hashed words' cosine
    billed      a ledger row of its own, endpoint ``shadow``, request id ``shadow-<the answer's>``:
                the tenant pays for it, and a cost report grouped by endpoint shows it apart
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import random
import re
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import router
from tiers import Finished, Generation, TextDelta, Tier, Usage

log = logging.getLogger(__name__)
SHORT_WORDS = 12
_WORD = re.compile(r"[a-z0-9_]+")


@dataclass(frozen=True, slots=True)
class Job:
    """One answer to shadow: who, which tier answered what, and the request as a tier takes it."""

    request_id: str
    tenant: str
    tier: str  # the tier that answered
    reference: str
    generation: Generation
    answer: str
    structured: bool
    keys: router.QualityKeys
    worst_usd: float  # the shadow's cost if it used every token of max_tokens
    threshold: float


# Bills a shadow (its ledger row) and says what it cost, in USD.
Bill = Callable[[Job, str, Usage], Awaitable[float]]
# Labels the answer shadowed: its request id, whether the reference agreed.
Learn = Callable[[str, bool], object]


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


# The cosine similarity of two prose answers by the embedding model (None: it is not at hand).
Similarity = Callable[[str, str], Awaitable[float | None]]


def agree(
    answer: str, reference: str, structured: bool, threshold: float, similarity: float | None = None
) -> bool:
    """Whether two answers to one request agree (see the module's docstring); ``similarity``: the
    embedding model's cosine of the two, when it was had (prose only)."""
    if structured:
        with contextlib.suppress(ValueError):
            return bool(json.loads(answer) == json.loads(reference))
        return False
    a, b = _words(answer), _words(reference)
    if len(a) <= SHORT_WORDS and len(b) <= SHORT_WORDS:
        return a == b
    if similarity is not None:
        return similarity >= threshold
    va = {zlib.crc32(w.encode()) for w in a}
    vb = {zlib.crc32(w.encode()) for w in b}
    return len(va & vb) / math.sqrt(len(va) * len(vb)) >= threshold


def is_prose(answer: str, reference: str, structured: bool) -> bool:
    return not structured and max(len(_words(answer)), len(_words(reference))) > SHORT_WORDS


def embedding_similarity(embedder: Any) -> Similarity:
    """Prose compared by the in-process embedding model (tiers/embedding: unit vectors, so the dot
    product is the cosine); None while the model is away, or for text longer than it reads whole."""

    async def similarity(a: str, b: str) -> float | None:
        if not embedder.available:
            return None
        try:
            await embedder.loaded()
            rows = embedder.tokenize([a, b])
            if max(len(r) for r in rows) > embedder.max_tokens:
                return None
            va, vb = (np.asarray(v, dtype=np.float32) for v in await embedder.embed(rows))
        except Exception as exc:
            log.info("shadow: no embedding, the words compared instead: %s", exc)
            return None
        norm = float(np.linalg.norm(va) * np.linalg.norm(vb))
        return float(va @ vb) / norm if norm else None

    return similarity


class Shadows:
    def __init__(
        self,
        tier_of: Callable[[str], Tier],
        queued: Callable[[str], int],
        learn: Learn,
        *,
        similarity: Similarity | None = None,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
    ) -> None:
        self._tier_of = tier_of
        self._similarity = similarity
        self._queued = queued
        self._learn = learn
        self._clock = clock
        self._rng = random.Random(seed)
        self._spent: dict[tuple[str, str], float] = {}  # (tenant, UTC day) → USD; today's only
        self._running: asyncio.Task[None] | None = None
        self.counts = {"sampled": 0, "run": 0, "agreed": 0, "skipped_busy": 0, "skipped_budget": 0}

    def _day(self) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(self._clock()))

    def spent(self, tenant: str) -> float:
        return self._spent.get((tenant, self._day()), 0.0)

    def sample(self, policy: router.ShadowPolicy, tenant: str) -> bool:
        """Whether to shadow an answer that is starting (its text is then kept as it passes)."""
        if not policy.enabled or self._rng.random() >= policy.rate:
            return False
        if self.spent(tenant) >= policy.budget_usd:
            self.counts["skipped_budget"] += 1
            return False
        self.counts["sampled"] += 1
        return True

    def offer(self, job: Job, budget_usd: float, bill: Bill) -> bool:
        """Run ``job`` in the background if it fits the budget and nothing else is shadowing."""
        if job.worst_usd + self.spent(job.tenant) > budget_usd:
            self.counts["skipped_budget"] += 1
            return False
        if (self._running is not None and not self._running.done()) or self._queued(job.reference) > 0:
            self.counts["skipped_busy"] += 1
            return False
        key = (job.tenant, self._day())
        if key not in self._spent:  # a tenant's first today: earlier days' spending is done with
            self._spent = {k: v for k, v in self._spent.items() if k[1] == key[1]}
        self._spent[key] = self._spent.get(key, 0.0) + job.worst_usd  # held until it is known
        self._running = asyncio.get_running_loop().create_task(self._run(job, key, bill), name="shadow")
        return True

    async def _run(self, job: Job, key: tuple[str, str], bill: Bill) -> None:
        await asyncio.sleep(0)  # after the client's answer: the ending that offered it returns first
        text, usage = [], Usage(0, 0)
        try:
            async for event in self._tier_of(job.reference).generate(job.generation):
                if isinstance(event, TextDelta):
                    text.append(event.text)
                elif isinstance(event, Finished):
                    usage = event.usage
            cost = await bill(job, "".join(text), usage)
        except Exception as exc:
            self._spent[key] = self._spent.get(key, 0.0) - job.worst_usd
            log.info("shadow of %s on %s failed: %s", job.request_id, job.reference, exc)
            return
        self._spent[key] = self._spent.get(key, 0.0) + cost - job.worst_usd
        self.counts["run"] += 1
        reference, similar = "".join(text), None
        if self._similarity is not None and is_prose(job.answer, reference, job.structured):
            similar = await self._similarity(job.answer, reference)
        same = agree(job.answer, reference, job.structured, job.threshold, similar)
        self.counts["agreed"] += same
        self._learn(job.request_id, same)

    async def aclose(self) -> None:
        if self._running is not None:
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._running
