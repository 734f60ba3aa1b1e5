"""The work each tier has in hand: requests routed to it and not yet observed, each with when the
tier was expected to begin it and how long it was predicted to take once begun.

A tier's live state says *how many* requests it is serving and queueing, not how long they will
take.  Counting each as the tier's mean service time made a short chat behind a request that
was about to finish look as delayed as one behind a long generation that had just started, so
time to first token on a one-slot edge was mispredicted by several times.  This book keeps, per
tier, every request the router sent there with its predicted *service* time (the median total
the tier's model predicts for it with nothing ahead) and its expected start (at once, or, when
every slot the tier has been seen to use is taken, when the work ahead of it was expected to
drain).  A new request's wait is then the time left of the requests being served plus the
service times of those queued.  Only service times enter the book, never predicted totals: a
total includes the wait, so booking totals fed each prediction's wait coefficient back into
the next request's wait, and a queue of 20 grew predictions geometrically (seen in a replay:
10^8 s).  The tier's counts stay the truth about how many there are: the newest
``in_flight + queued`` entries are taken (an entry whose request failed or moved to another
tier is never observed; it ages out), and requests the router did not see count as the mean
service time, as before.

A tier that says how many it serves at once (``TierState.slots``: a batching edge, measured) is
a set of slots: a request that finds one free starts at once (no wait; its tokens come slower,
by the tier's measured ``slowdown``, which the predictor's features carry), and one that finds
them full waits for the earliest of those being served to finish, then for the queued ones
ahead to be served ``slots`` at a time.  Counting the batch's running requests as work ahead,
as one slot serving them in turn would, made a batched edge with free slots look busy.  The
measured count can come down below the requests running (a width stopped paying on loaded
cores): a new one then waits until enough of them have finished to leave a slot free, not for
the first of them (the 1.0/s replay: short chats waited 9-10 s for a long generation predicted
to take 1 s).
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
    start: float  # when the tier was expected to begin it
    service_s: float  # predicted time once begun

    def left(self, now: float) -> float:
        begun = max(now - self.start, 0.0)
        return max(self.service_s - begun, _OVERRUN_LEFT * self.service_s)


class WorkBook:
    def __init__(self) -> None:
        self._tiers: dict[str, OrderedDict[int, _Entry]] = {}
        self._slots: dict[str, int] = {}  # the most requests each tier was seen serving at once
        self._tickets = itertools.count(1)

    def ticket(self) -> int:
        """A new ticket, for a request to be added later."""
        return next(self._tickets)

    def add(
        self,
        tier: str,
        service_s: float,
        now: float,
        wait: tuple[float, float],
        queues: bool,
        ticket: int | None = None,
    ) -> int:
        """A request sent to ``tier`` now, predicted to take ``service_s`` once begun; ``wait``:
        the (busy, ahead) this book gave for it; ``queues``: whether it waits for a slot
        (:meth:`queues`); ``ticket``: one :meth:`ticket` gave, else a new one.  Returns its
        ticket for :meth:`done`."""
        ticket = next(self._tickets) if ticket is None else ticket
        entries = self._tiers.setdefault(tier, OrderedDict())
        start = now + (wait[0] + wait[1] if queues else 0.0)
        entries[ticket] = _Entry(start, service_s)
        while entries:
            oldest = next(iter(entries.values()))
            if oldest.start + oldest.service_s + _FORGET_AFTER_S >= now:
                break
            entries.popitem(last=False)
        return ticket

    def done(self, tier: str, ticket: int) -> None:
        entries = self._tiers.get(tier)
        if entries is not None:
            entries.pop(ticket, None)

    def pending(self, tier: str) -> int:
        return len(self._tiers.get(tier, ()))

    def slots(self, tier: str, said: int = 0) -> int:
        """How many requests ``tier`` serves at once: what it says (``TierState.slots``, the edge's
        measured batch width), else the most it has been seen serving (one, for a one-slot edge)."""
        return said or self._slots.get(tier, 1)

    def queues(self, tier: str, in_flight: int, queued: int, slots: int = 0) -> bool:
        """Whether a request sent now waits for a slot: some are queued already, or the tier is
        serving as many as it has slots (:meth:`slots`; ``slots``: what the tier says)."""
        return queued > 0 or in_flight >= self.slots(tier, slots)

    def wait(
        self, tier: str, in_flight: int, queued: int, now: float, mean_service_s: float, slots: int = 0
    ) -> tuple[float, float]:
        """(busy_s, ahead_s): the predicted time left of the ``in_flight`` requests being served
        (the longest of them), and the service times of the ``queued`` ones; for a tier that says
        its ``slots``, the wait for a slot: none while one is free, else the earliest of the
        served to finish, and the queued ones' service times shared among the slots."""
        if in_flight > self._slots.get(tier, 1):
            self._slots[tier] = in_flight
        if slots and in_flight < slots and queued == 0:
            return 0.0, 0.0  # a slot is free: it starts at once
        entries = self._tiers.get(tier) or OrderedDict[int, _Entry]()
        count = in_flight + queued
        known = list(itertools.islice(reversed(entries.values()), max(count, 0)))[::-1]  # oldest first
        unknown = count - len(known)
        # Requests the router did not route (another process, before a restart) are the oldest.
        unknown_busy = min(unknown, in_flight)
        serving, waiting = known[: in_flight - unknown_busy], known[in_flight - unknown_busy :]
        lefts = [mean_service_s] * unknown_busy + [e.left(now) for e in serving]
        ahead = (unknown - unknown_busy) * mean_service_s + sum(e.service_s for e in waiting)
        if slots:  # a slot to free up, then the queue served that many at a time
            return _freed(lefts, slots), ahead / slots
        busy = unknown_busy * mean_service_s + max(lefts[unknown_busy:], default=0.0)
        return busy, ahead


def _freed(lefts: list[float], slots: int) -> float:
    """When a slot frees up for a request that finds ``len(lefts)`` running on ``slots`` slots:
    once all but ``slots - 1`` of them have finished (the first to finish, when as many run as
    there are slots)."""
    if not lefts:
        return 0.0
    finishing = sorted(lefts)
    return finishing[max(0, min(len(finishing) - slots, len(finishing) - 1))]
