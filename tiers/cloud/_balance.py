"""Choosing a replica: weighted least load, with session affinity by consistent hashing with bounded load.

Without an affinity key the request goes to the replica with the least work ahead
of it (its load plus this request's cost, divided by its weight).  With one, the
key's place on a hash ring names a preferred replica, so turns of one
conversation land where their prefix is already in vLLM's prefix cache, unless
that replica would then carry more than ``bound`` times the average load; then
the next replica along the ring is tried (Mirrokni, Thorup, Zadimoghaddam,
"Consistent Hashing with Bounded Loads", 2018), and least load if none fits.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Collection, Sequence

from tiers.cloud._replica import Replica

STRATEGIES = ("least-load", "round-robin")


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class Balancer:
    def __init__(
        self,
        *,
        strategy: str = "least-load",
        bound: float = 1.25,
        virtual_nodes: int = 64,
        slow_start_s: float = 10.0,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(
                f"unknown balancing strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
            )
        self._strategy = strategy
        self._turn = 0
        self._bound = bound
        self._virtual_nodes = virtual_nodes
        self._slow_start_s = slow_start_s
        self._ring: list[tuple[int, str]] = []
        self._points: list[int] = []

    def set_members(self, names: Collection[str]) -> None:
        self._ring = sorted(
            (_hash(f"{name}#{i}"), name) for name in names for i in range(self._virtual_nodes)
        )
        self._points = [point for point, _ in self._ring]

    def pick(
        self,
        replicas: Sequence[Replica],
        *,
        cost: float,
        mean_cost: float,
        now: float,
        affinity: str | None = None,
        exclude: Collection[str] = (),
    ) -> tuple[Replica, str] | None:
        """The replica for a request and how it was chosen (``affinity``, ``least-load``), or None."""
        candidates = {r.name: r for r in replicas if r.available(now) and r.name not in exclude}
        if not candidates:
            return None
        if self._strategy == "round-robin":  # the baseline: blind to load and conversations
            self._turn += 1
            ordered = list(candidates.values())
            return ordered[self._turn % len(ordered)], "round-robin"
        loads = {name: r.load(mean_cost) for name, r in candidates.items()}
        if affinity is not None and self._ring:
            # The fair share times the bound, plus one average request of slack so that a stale
            # load reading does not move a conversation; an idle replica always takes one request.
            fair = (sum(loads.values()) + cost) / len(candidates)
            limit = max(self._bound * fair + mean_cost, cost)
            start = bisect.bisect(self._points, _hash(affinity))
            seen: set[str] = set()
            for i in range(len(self._ring)):
                name = self._ring[(start + i) % len(self._ring)][1]
                if name in seen:
                    continue
                seen.add(name)
                if name in candidates and loads[name] + cost <= limit:
                    return candidates[name], "affinity"
        best = min(
            candidates.values(),
            key=lambda r: ((loads[r.name] + cost) / r.weight(now, self._slow_start_s), r.in_flight),
        )
        return best, "least-load"
