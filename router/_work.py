"""The work each tier has in hand: requests routed to it and not yet observed, each with when it
was sent and when it was predicted to finish.

A tier's live state says *how many* requests it is serving and queueing, not how long they will
take.  Counting each as the tier's mean service time made a short chat behind a request that
was about to finish look as delayed as one behind a long generation that had just started, so
time to first token on a one-slot edge was mispredicted by several times.  This book keeps, per
tier, the finish time predicted for every request the router sent there (its median total,
which includes its own wait), so the wait of a new request is the time until the work ahead
drains: for the requests being served, what is left of them; for the queued ones, up to the
last predicted finish.  The tier's counts stay the truth about how many there are: the newest
``in_flight + queued`` entries are taken (an entry whose request failed or moved to another
tier is never observed; it ages out), and requests the router did not see count as the mean
service time, as before.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass

# An entry is forgotten this long after its predicted finish (its request failed, or is lost).
_FORGET_AFTER_S = 120.0
# A request past its predicted finish is still running: assume this share of its prediction is left.
_OVERRUN_LEFT = 0.1


@dataclass(frozen=True, slots=True)
class _Entry:
    sent: float
    finish: float  # predicted
    predicted_s: float


class WorkBook:
    def __init__(self) -> None:
        self._tiers: dict[str, OrderedDict[int, _Entry]] = {}
        self._tickets = itertools.count(1)

    def add(self, tier: str, predicted_s: float, now: float) -> int:
        """A request sent to ``tier`` now, predicted to take ``predicted_s`` in all; its ticket."""
        ticket = next(self._tickets)
        entries = self._tiers.setdefault(tier, OrderedDict())
        entries[ticket] = _Entry(now, now + predicted_s, predicted_s)
        while entries and next(iter(entries.values())).finish + _FORGET_AFTER_S < now:
            entries.popitem(last=False)
        return ticket

    def done(self, tier: str, ticket: int) -> None:
        entries = self._tiers.get(tier)
        if entries is not None:
            entries.pop(ticket, None)

    def pending(self, tier: str) -> int:
        return len(self._tiers.get(tier, ()))

    def wait(
        self, tier: str, in_flight: int, queued: int, now: float, mean_service_s: float
    ) -> tuple[float, float]:
        """(busy_s, ahead_s): the predicted time left of the ``in_flight`` requests being served,
        and the further time until the ``queued`` ones are done too."""
        entries = self._tiers.get(tier)
        count = in_flight + queued
        if not entries or count <= 0:
            return in_flight * mean_service_s, queued * mean_service_s
        known = list(itertools.islice(reversed(entries.values()), count))[::-1]  # oldest first
        unknown = count - len(known)
        # Requests the router did not route (another process, before a restart) are the oldest.
        unknown_busy = min(unknown, in_flight)
        serving, waiting = known[: in_flight - unknown_busy], known[in_flight - unknown_busy :]
        busy = unknown_busy * mean_service_s
        busy += max((_left(e, now) for e in serving), default=0.0)
        drained = max((_left(e, now) for e in waiting), default=0.0)
        ahead = (unknown - unknown_busy) * mean_service_s + max(0.0, drained - busy)
        return busy, ahead


def _left(entry: _Entry, now: float) -> float:
    return max(entry.finish - now, _OVERRUN_LEFT * entry.predicted_s)
