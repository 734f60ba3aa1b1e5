"""Admission control in front of every tier: bounded fast and slow lanes, 429 at once beyond the bound.

Each tier gets a :class:`Gate` with a number of service slots (how many requests it
works on at once: configured, or read live from the tier, so a batching edge's slots follow
what its batch is measured to sustain).  A request that finds no free slot waits in a lane chosen by
its predicted cost: the *fast* lane for short requests, the *slow* lane for long
ones.  A lane holds at most ``service rate × tolerable queueing delay`` requests
(the service rate is measured live: slots / the mean time a request holds one at
that many slots, :meth:`Gate.rate`); a request beyond that is refused at once with
429 and a ``Retry-After`` of the expected wait, so latency cannot explode.  A freed slot goes to the fast lane
first, but every ``slow_share``-th one to the slow lane when it has waiters, so
short requests never starve behind video and long ones still move.

Stage 7 is a plain call in the dispatcher (:meth:`Gates.take`, before the tier generates); the slot
is released by the request's ending (gateway/pipeline/ending.py), however it ends.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import time
from collections.abc import Callable, Mapping

import msgspec

from gateway.ops.gates import Lane
from gateway.ops.metrics import Metrics
from tiers import Tier, TierOverloaded


class LaneSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # How long a request may wait for a slot before it would rather be told 429.
    max_queue_delay_s: float


class AdmissionSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # Requests predicted to cost more than this (max_tokens + a tenth of the prompt's tokens) take
    # the slow lane.
    slow_cost: float = 512.0
    fast: LaneSettings = msgspec.field(default_factory=lambda: LaneSettings(max_queue_delay_s=2.0))
    slow: LaneSettings = msgspec.field(default_factory=lambda: LaneSettings(max_queue_delay_s=30.0))
    # Of the slots freed while both lanes wait, one in this many goes to the slow lane.
    slow_share: int = 4
    # Requests each tier works on at once (vLLM batches). A tier left out: what it says it runs at once
    # (the edge: its engine instances, edge.instances), else 16.
    slots: dict[str, int] = msgspec.field(default_factory=lambda: {"cloud": 64})
    # Completions per second assumed until enough have been measured.
    initial_rate_per_s: float = 2.0
    # Every lane holds at least this many waiters, whatever the rate: a one-slot edge model that
    # takes seconds per answer still queues a few requests instead of refusing the second one.
    min_queue: int = 4
    # Tenants whose requests go ahead of the others' in their lane (and may also fill it past the bound
    # by at most the same number again).
    priority_tenants: list[str] = msgspec.field(default_factory=list)


class Gate:
    def __init__(
        self,
        tier: str,
        slots: int | Callable[[], int],
        settings: AdmissionSettings,
        metrics: Metrics | None = None,
        slowdown: Callable[[int], float] | None = None,
    ) -> None:
        self._tier = tier
        self._metrics = metrics or Metrics(enabled=False)
        # Requests that asked for a slot (admitted, queued or refused): the scaling signal's arrivals.
        self.arrivals = 0
        self._waits = {lane: self._metrics.child(self._metrics.queue_wait, tier, lane.value) for lane in Lane}
        self._slots = slots if callable(slots) else lambda: slots
        self._settings = settings
        self._busy = 0
        # Per lane: priority tenants' waiters, then everyone else's.
        self._lanes: dict[Lane, tuple[collections.deque[asyncio.Future[None]], ...]] = {
            Lane.FAST: (collections.deque(), collections.deque()),
            Lane.SLOW: (collections.deque(), collections.deque()),
        }
        self._priority = frozenset(settings.priority_tenants)
        self._delay = {Lane.FAST: settings.fast.max_queue_delay_s, Lane.SLOW: settings.slow.max_queue_delay_s}
        # How many times longer a request holds its slot beside ``width - 1`` others than alone (a
        # batching tier's measured slowdown; 1 for a tier whose requests do not slow each other).
        self._slowdown = slowdown or (lambda width: 1.0)
        # How long each of the last 64 completed requests would have held its slot alone.
        self._service_s: collections.deque[float] = collections.deque(maxlen=64)
        self._grants = 0
        # Batch lines (deferred requests) holding or waiting for a slot, and what to call when an
        # interactive request asks for one (the batch runner stops its lines: gateway/api/batches/).
        self.deferred = 0
        self.on_interactive: Callable[[], None] | None = None

    @property
    def slots(self) -> int:
        """Requests the tier works on at once now (at least 1)."""
        return max(1, self._slots())

    @property
    def waiting(self) -> int:
        return sum(len(q) for lane in self._lanes.values() for q in lane)

    def waiting_in(self, lane: Lane) -> int:
        return sum(len(q) for q in self._lanes[lane])

    def lane_of(self, cost: float) -> Lane:
        return Lane.SLOW if cost > self._settings.slow_cost else Lane.FAST

    @property
    def busy(self) -> int:
        """Slots taken now."""
        return self._busy

    def rate(self) -> float:
        """The tier's service rate: slots / the mean time a request holds one *at that many slots*
        (last 64 completed), or the configured guess until 8 have completed.  Each hold is taken
        back to what it would have been alone (divided by the slowdown at the width it ran at)
        and then stretched by the slowdown at the full width: holds measured in a wide batch,
        divided by a slot count that has since come down, read a batched edge as slower than a
        serial one (the 1.0/s replay's lane filled at 4 waiting, "0.2 requests/s").  A batch of
        4 at 1.6x the tokens/s of one serves 1.6x the rate of one slot, never less.  A service
        rate, not the rate requests happened to arrive at: idle time does not lower it."""
        if len(self._service_s) < 8:
            return self._settings.initial_rate_per_s
        slots = self.slots
        mean = sum(self._service_s) / len(self._service_s) * max(1.0, self._slowdown(slots))
        return slots / mean if mean > 0 else self._settings.initial_rate_per_s

    def bound(self, lane: Lane) -> int:
        return max(self._settings.min_queue, 1, math.floor(self.rate() * self._delay[lane]))

    @property
    def interactive(self) -> int:
        """Requests other than batch lines holding or waiting for a slot."""
        return self._busy + self.waiting - self.deferred

    async def acquire(self, cost: float, tenant: str = "", *, deferred: bool = False) -> None:
        """A slot, waiting in the lane of ``cost`` (a ``deferred`` request's, a batch line's: the slow
        lane, whatever its cost); the caller releases it with ``deferred`` as it took it."""
        lane = Lane.SLOW if deferred else self.lane_of(cost)
        self.arrivals += 1
        if deferred:
            self.deferred += 1
        elif self.on_interactive is not None:
            self.on_interactive()
        try:
            await self._acquire(lane, tenant)
        except BaseException:
            if deferred:
                self.deferred -= 1
            raise

    async def _acquire(self, lane: Lane, tenant: str) -> None:
        if self._busy < self.slots and not self.waiting:
            self._busy += 1
            self._waits[lane].observe(0.0)
            return
        first, rest = self._lanes[lane]
        queue = first if tenant in self._priority else rest
        waiting = len(first) + len(rest)
        if len(queue) >= self.bound(lane):
            wait = (waiting + 1 if queue is rest else len(first) + 1) / self.rate()
            raise TierOverloaded(
                self._tier,
                f"the {lane.value} lane is full ({waiting} waiting, the bound for a "
                f"{self._delay[lane]:g} s queueing delay at {self.rate():.1f} requests/s)",
                retry_after_s=wait,
                reason=f"queue_{lane.value}",
            )
        slot: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(slot)
        queued = time.perf_counter()
        try:
            await slot
            self._waits[lane].observe(time.perf_counter() - queued)
        except BaseException:
            if slot.done() and not slot.cancelled():
                self.release()  # granted, then abandoned: pass it on
            else:
                with contextlib.suppress(ValueError):
                    queue.remove(slot)
            raise

    def release(self, *, service_s: float | None = None, width: int = 1, deferred: bool = False) -> None:
        """Free a slot; ``service_s``: how long a request that completed held it, ``width``: the
        slots taken when it was granted one (itself included)."""
        if deferred:
            self.deferred -= 1
        if service_s is not None:
            self._service_s.append(service_s / max(1.0, self._slowdown(width)))
        self._busy -= 1
        # Waiters take the free slots: none when the slots shrank below the busy ones, more than
        # this one when they grew.
        while self._busy < self.slots and (nxt := self._next_waiter()) is not None:
            self._busy += 1
            nxt.set_result(None)

    def _next_waiter(self) -> asyncio.Future[None] | None:
        fast, slow = self._lanes[Lane.FAST], self._lanes[Lane.SLOW]
        self._grants += 1
        slow_turn = any(slow) and self._grants % self._settings.slow_share == 0
        for lane in (slow, fast) if slow_turn else (fast, slow):
            for queue in lane:  # priority tenants first
                while queue:
                    slot = queue.popleft()
                    if not slot.done():
                        return slot
        return None


class Slot:
    """A slot a request holds on a tier's gate, from stage 7 until its ending releases it (once)."""

    __slots__ = ("_deferred", "_gate", "_started", "_width")

    def __init__(self, gate: Gate, deferred: bool = False) -> None:
        self._gate: Gate | None = gate
        self._deferred = deferred
        self._started = time.monotonic()
        self._width = gate.busy  # the slots taken when it was granted, itself included

    def release(self, *, completed: bool) -> None:
        """``completed``: the answer finished, so how long it held the slot is a service time."""
        gate, self._gate = self._gate, None
        if gate is not None:
            held = time.monotonic() - self._started if completed else None
            gate.release(service_s=held, width=self._width, deferred=self._deferred)


class Gates:
    """Each tier's gate, by name (a tier without one is not admission-controlled)."""

    def __init__(self, gates: Mapping[str, Gate] | None = None) -> None:
        self.by_tier = dict(gates or {})

    async def take(self, tier: str, cost: float, tenant: str, *, deferred: bool = False) -> Slot | None:
        """Stage 7: a slot on ``tier``'s gate, waiting in its lane; 429 (TierOverloaded) when the
        lane is full.  ``deferred``: a batch line's (the slow lane; it yields to the others)."""
        gate = self.by_tier.get(tier)
        if gate is None:
            return None
        await gate.acquire(cost, tenant, deferred=deferred)
        return Slot(gate, deferred)

    def waiting(self, tier: str) -> int:
        gate = self.by_tier.get(tier)
        return gate.waiting if gate is not None else 0


def _slots(name: str, tier: Tier, settings: AdmissionSettings) -> int | Callable[[], int]:
    """The configured slots for a tier, else what the tier says it can run at once, read live
    (the edge's changes as its batch is measured), else 16."""
    if configured := settings.slots.get(name):
        return configured
    if hasattr(tier, "concurrency"):
        return lambda: int(tier.concurrency)
    return 16


def _slowdown(tier: Tier) -> Callable[[int], float] | None:
    """The tier's measured slowdown at a width (a batching edge's), else none."""
    slowdown: Callable[[int], float] | None = getattr(tier, "slowdown_at", None)
    return slowdown


def gates_for(
    tiers: Mapping[str, Tier], settings: AdmissionSettings, metrics: Metrics | None = None
) -> Gates:
    """A gate for every tier (none when admission is off)."""
    if not settings.enabled:
        return Gates()
    return Gates(
        {
            name: Gate(name, _slots(name, tier, settings), settings, metrics, _slowdown(tier))
            for name, tier in tiers.items()
        }
    )
