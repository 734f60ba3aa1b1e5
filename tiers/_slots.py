"""How many requests a batching engine sustains, measured from its own decode steps.

A batching engine (the llama.cpp edge with ``edge.max_sequences`` above 1) may decode up to its
configured number of sequences together, but whether one more sequence is worth taking depends on the
machine: on two shared cores the step of 4 sequences cost about as much more than the step of 2 as it
gave, so aggregate tokens/s hardly rose (``bench.edge_batch``: 70 tokens/s at 2, 72 at 4) while every
stream in the batch slowed.  A request is then better queued than admitted.

:class:`SustainedSlots` keeps, per *width* (sequences decoding in one step), a smoothed time of a decode
step, hence tokens/s at that width (width / step time).  The slot count is the largest width, up to the
configured most, reached by widths each of which still raised tokens/s by at least :data:`MIN_GAIN` over
the measured width below it.  A width not measured yet (or not seen for :data:`FORGET_S`) counts as
worth it, so the count starts at the configured most and, after it has come down, goes back up from
time to time to measure the wider batches again: when they have become worth it (the other engine on
the cores went quiet), it stays up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

# A width must raise tokens/s by this share over the width below it to be worth a slot.
MIN_GAIN = 0.05
# Steps of a width before its tokens/s counts (one step can be stretched by anything on the cores).
MIN_STEPS = 16
# Weight of a new step in the smoothed step time.
ALPHA = 0.1
# A width not seen for this long is measured again (the count goes back up to reach it).
FORGET_S = 60.0

__all__ = ["SustainedSlots"]


@dataclass(slots=True)
class _Width:
    step_s: float
    steps: int
    seen: float


class SustainedSlots:
    """Requests an engine that batches up to ``most`` sequences should take at once, as measured."""

    def __init__(self, most: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.most = most
        self._clock = clock
        self._widths: dict[int, _Width] = {}

    def step(self, width: int, seconds: float) -> None:
        """One decode step of ``width`` sequences (a token each, no prompt chunk) took ``seconds``."""
        if width < 1 or seconds <= 0:
            return
        now = self._clock()
        found = self._widths.get(width)
        if found is None or now - found.seen > FORGET_S:
            self._widths[width] = _Width(seconds, 1, now)
            return
        found.step_s += ALPHA * (seconds - found.step_s)
        found.steps += 1
        found.seen = now

    def rates(self) -> dict[int, float]:
        """Tokens/s at each width measured (enough steps, recently)."""
        now = self._clock()
        return {
            width: width / w.step_s
            for width, w in sorted(self._widths.items())
            if w.steps >= MIN_STEPS and now - w.seen <= FORGET_S
        }

    @property
    def slots(self) -> int:
        """The largest width up to ``most`` that every measured step up to it made worth taking."""
        rates = self.rates()
        below = None  # tokens/s of the widest measured width so far
        for width in range(1, self.most + 1):
            rate = rates.get(width)
            if rate is None:
                continue  # not measured: worth trying
            if below is not None and rate < below * (1 + MIN_GAIN):
                return width - 1
            below = rate
        return self.most

    def slowdown(self, width: int) -> float:
        """How many times longer each token of a sequence takes in a step of ``width`` sequences
        than alone (the step time at ``width`` over the step time at 1): what a request joining a
        batch of ``width - 1`` pays per token.  A width not measured counts as the widest measured
        below it; 1.0 while a lone sequence's step is not measured."""
        rates = self.rates()
        alone = rates.get(1)
        if alone is None:
            return 1.0
        known = max((w for w in rates if w <= width), default=1)
        return max(1.0, alone * known / rates[known])  # step(w) / step(1) = (w / rate(w)) / (1 / rate(1))

    def joining(self, load: int) -> float:
        """The slowdown of a request sent to an engine with ``load`` requests running or waiting:
        it decodes beside the running ones, or, behind a queue, in a full batch."""
        return self.slowdown(min(load + 1, self.slots))

    def measured(self) -> bool:
        """Whether the count rests on a measurement (some width has enough recent steps)."""
        return bool(self.rates())
