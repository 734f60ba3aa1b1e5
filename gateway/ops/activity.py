"""Recent traffic of this gateway, in memory: the last route decisions and their outcome.

A bounded ring (``recent`` entries) that the admin UI's live view reads: where each request
went and why, and, over a short window, requests per second, p95 latency, the cache hit
rate, each tier's share and how often each residency rule matched.  It belongs to one process
and is lost on restart; the ledger is the durable record.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

DEFAULT_RECENT = 500
MAX_MODEL_CHARS = 256  # as the ledger keeps it
MAX_REASON_CHARS = 1000


@dataclass(frozen=True, slots=True)
class Decision:
    """One finished request as the operator sees it."""

    ts: float  # wall clock, when the request arrived
    tenant: str
    model_asked: str
    tier: str  # "" when no tier answered (refused, failed before routing)
    reason: str
    cache: str  # hit | miss | bypass
    status: int
    latency_ms: float
    degraded: tuple[str, ...] = ()
    # The residency rules that matched the request, as (rule label, action); never the text matched.
    residency: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "tenant": self.tenant,
            "model_asked": self.model_asked,
            "tier": self.tier,
            "reason": self.reason,
            "cache": self.cache,
            "status": self.status,
            "latency_ms": round(self.latency_ms, 1),
            "degraded": list(self.degraded),
            "residency": [f"{label} -> {action}" for label, action in self.residency],
        }


@dataclass(frozen=True, slots=True)
class Summary:
    window_s: float
    requests: int
    requests_per_s: float
    p95_ms: float | None  # of answered (200) requests; None when there were none
    cache_hit_rate: float | None  # hits among answered requests that looked in the cache
    share: dict[str, float]  # tier → fraction of answered requests
    errors: int  # requests not answered 200
    p95_ms_by_tier: dict[str, float]
    # "rule -> action" → requests it matched in the window, answered or refused.
    residency: dict[str, int] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "requests": self.requests,
            "requests_per_s": round(self.requests_per_s, 3),
            "p95_ms": None if self.p95_ms is None else round(self.p95_ms, 1),
            "cache_hit_rate": self.cache_hit_rate,
            "share": self.share,
            "errors": self.errors,
            "p95_ms_by_tier": {t: round(v, 1) for t, v in self.p95_ms_by_tier.items()},
            "residency": self.residency,
        }


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank percentile (``q`` in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


class Activity:
    def __init__(self, recent: int = DEFAULT_RECENT) -> None:
        self._ring: deque[Decision] = deque(maxlen=max(1, recent))
        self._day = ""  # the UTC day (YYYY-MM-DD) _spend counts
        self._spend: dict[str, int] = {}  # nano-USD per tier that day, as the ledger rows charged it

    def spent(self, tier: str, nusd: int, day: str) -> None:
        """A ledger row charged ``nusd`` to ``tier`` on UTC ``day``."""
        if day != self._day:
            if day < self._day:
                return  # a row of yesterday written after midnight
            self._day, self._spend = day, {}
        self._spend[tier] = self._spend.get(tier, 0) + nusd

    def with_spend(self, states: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Tier states with each provider tier's spend today (UTC, this gateway since it started) in
        ``provider.spent_today_usd``, for /readyz and the live view."""
        today = time.strftime("%Y-%m-%d", time.gmtime())
        spend = self._spend if self._day == today else {}
        for state in states:
            if "provider" in state:
                state["provider"] = {
                    **state["provider"],
                    "spent_today_usd": spend.get(state["name"], 0) / 1e9,
                }
        return states

    def note(self, decision: Decision) -> None:
        if len(decision.model_asked) > MAX_MODEL_CHARS or len(decision.reason) > MAX_REASON_CHARS:
            # A client's megabyte-long model name must not be kept `recent` times over.
            decision = dataclasses.replace(
                decision,
                model_asked=decision.model_asked[:MAX_MODEL_CHARS],
                reason=decision.reason[:MAX_REASON_CHARS],
            )
        self._ring.append(decision)

    def recent(self, limit: int = 20) -> list[Decision]:
        """The latest decisions, newest first."""
        out: list[Decision] = []
        for decision in reversed(self._ring):
            if len(out) >= limit:
                break
            out.append(decision)
        return out

    def summary(self, window_s: float = 60.0, now: float | None = None) -> Summary:
        now = time.time() if now is None else now
        since = now - window_s
        window = [d for d in self._ring if d.ts >= since]
        answered = [d for d in window if d.status == 200]
        looked = [d for d in answered if d.cache in ("hit", "semantic", "miss")]
        latencies: dict[str, list[float]] = {}
        matched: Counter[str] = Counter(f"{rule} -> {action}" for d in window for rule, action in d.residency)
        for d in answered:
            latencies.setdefault(d.tier, []).append(d.latency_ms)
        # Over the time the window really covers: a young process has not run for window_s yet.
        span = min(window_s, max(1.0, now - window[0].ts)) if window else window_s
        return Summary(
            window_s=window_s,
            requests=len(window),
            requests_per_s=len(window) / span,
            p95_ms=percentile([d.latency_ms for d in answered], 95) if answered else None,
            cache_hit_rate=(sum(d.cache != "miss" for d in looked) / len(looked)) if looked else None,
            share={t: len(v) / len(answered) for t, v in sorted(latencies.items())},
            errors=len(window) - len(answered),
            p95_ms_by_tier={t: percentile(v, 95) for t, v in sorted(latencies.items())},
            residency=dict(sorted(matched.items())),
        )
