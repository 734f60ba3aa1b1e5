"""What the pipeline hands back: an answer on its way, and the facts its response headers carry."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

import router
from gateway.pipeline.answers.exact import CacheStatus
from tiers import Event, Finished


@dataclass(frozen=True, slots=True)
class Routed:
    tier: str
    reason: str  # X-Tiergate-Route-Reason: rendered from the router's typed reason, never parsed
    cache: CacheStatus = CacheStatus.BYPASS
    degraded: tuple[str, ...] = ()
    # Time spent in the gateway before the answer (or its first byte) was ready, and in the cache.
    server_s: float = 0.0
    cache_s: float = 0.0
    instance: str = ""  # the replica or engine instance that served it
    # The router's median predictions for the tier that served, e.g. "ttft=80ms, total=900ms,
    # tokens=40, per_token=20.0ms" (the answer's expected length, and the total's seconds per token).
    predicted: str = ""
    similarity: float | None = None  # a semantic hit's: X-Tiergate-Similarity
    embed_s: float = 0.0  # time the semantic cache spent embedding the last user turn


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer that has begun: where it comes from, the model answering, and its events (text
    deltas, then :class:`~tiers.Finished`).  JSON and SSE framing read the same events."""

    routed: Routed
    model: str
    events: AsyncGenerator[Event, None]
    completion_id: str
    # Set when the answer was read whole (a JSON answer, a cache hit): how it finished; its events are
    # then all in memory, and it can be recorded before it is framed.
    finished: Finished | None = None
    stream: bool = False  # framed as server-sent events (else one JSON body)
    include_usage: bool = False  # the client asked for a usage chunk (stream_options.include_usage)
    choices: int = 1  # answers the client asked for (n)
    obfuscate: bool = False  # stream_options.include_obfuscation: padding on every delta chunk


def predicted_header(decision: router.Decision, served: str) -> str:
    snapshot = decision.snapshot
    if snapshot is None or served not in snapshot.predictions:
        return ""
    p = snapshot.predictions[served]
    return (
        f"ttft={p.ttft_p50 * 1000:.0f}ms, total={p.total_p50 * 1000:.0f}ms,"
        f" tokens={p.tokens:.0f}, per_token={p.per_token_s * 1000:.1f}ms"
    )


async def from_list(events: list[Event]) -> AsyncGenerator[Event, None]:
    """Events already in memory, as the stream the framing reads."""
    for event in events:
        yield event


def whole(routed: Routed, model: str, events: list[Event], completion_id: str) -> Answer:
    """An answer read whole: its events in memory, and how it finished."""
    last = events[-1] if events else None
    finished = last if isinstance(last, Finished) else None
    return Answer(routed, model, from_list(events), completion_id, finished)
