"""The sustained-slots estimator (``tiers._slots``) on synthetic step timings: it starts at the most it may
take, comes down to the width past which tokens/s stop rising, and goes back up when wider batches are
forgotten and measured again, or when their steps get cheaper."""

from __future__ import annotations

from tiers._slots import FORGET_S, MIN_STEPS, SustainedSlots


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def feed(slots: SustainedSlots, step_s: dict[int, float], steps: int = MIN_STEPS) -> None:
    """``steps`` decode steps of each width, taking ``step_s[width]`` seconds each."""
    for _ in range(steps):
        for width, seconds in step_s.items():
            slots.step(width, seconds)


# Tokens/s 50, 80, 81, 83: a second sequence pays, a third and a fourth hardly do.
FLAT_PAST_TWO = {1: 0.020, 2: 0.025, 3: 0.037, 4: 0.048}


def test_it_starts_at_the_most_until_measured() -> None:
    slots = SustainedSlots(4, Clock())
    assert slots.slots == 4 and not slots.measured()
    feed(slots, FLAT_PAST_TWO, steps=MIN_STEPS - 1)  # too few steps to count
    assert slots.slots == 4 and not slots.measured()


def test_it_stops_where_another_sequence_no_longer_raises_tokens_per_second() -> None:
    slots = SustainedSlots(4, Clock())
    feed(slots, FLAT_PAST_TWO)
    assert slots.measured()
    assert slots.rates()[2] == 2 / 0.025
    assert slots.slots == 2


def test_it_stays_at_the_most_while_every_width_pays() -> None:
    slots = SustainedSlots(4, Clock())
    feed(slots, {1: 0.020, 2: 0.024, 3: 0.028, 4: 0.032})  # 50, 83, 107, 125 tokens/s
    assert slots.slots == 4


def test_it_comes_down_when_the_widest_steps_slow_and_goes_back_up_when_they_speed_up() -> None:
    slots = SustainedSlots(4, Clock())
    feed(slots, {1: 0.020, 2: 0.024, 3: 0.028, 4: 0.032})
    assert slots.slots == 4
    feed(slots, {4: 0.045}, steps=60)  # the other engine on the cores got busy: 4 at ~89 tokens/s
    assert slots.slots == 3
    feed(slots, {4: 0.030}, steps=60)
    assert slots.slots == 4


def test_a_width_not_seen_for_a_while_is_tried_again() -> None:
    clock = Clock()
    slots = SustainedSlots(4, clock)
    feed(slots, FLAT_PAST_TWO)
    assert slots.slots == 2
    clock.now += FORGET_S / 2
    feed(slots, {1: 0.020, 2: 0.025})  # only as wide as the count lets in
    assert slots.slots == 2
    clock.now += FORGET_S / 2 + 1  # widths 3 and 4 are now stale: worth measuring again
    assert slots.slots == 4
    feed(slots, {1: 0.020, 2: 0.025, 3: 0.028, 4: 0.032})  # and now they pay
    assert slots.slots == 4
    assert slots.rates()[4] == 4 / 0.032  # the stale width was measured afresh, not blended


def test_nonsense_steps_are_ignored() -> None:
    slots = SustainedSlots(2, Clock())
    for _ in range(MIN_STEPS):
        slots.step(0, 0.01)
        slots.step(1, 0.0)
    assert not slots.measured() and slots.slots == 2


def test_the_slowdown_of_a_joining_sequence_is_its_step_time_at_that_width_over_alone() -> None:
    slots = SustainedSlots(4, Clock())
    assert slots.slowdown(3) == 1.0  # nothing measured: no slowdown known
    feed(slots, {2: 0.025, 4: 0.048})
    assert slots.slowdown(4) == 1.0  # a lone sequence not measured: nothing to compare with
    feed(slots, {1: 0.020})
    assert slots.slowdown(1) == 1.0
    assert slots.slowdown(2) == 0.025 / 0.020
    assert slots.slowdown(3) == 0.025 / 0.020  # not measured: as the widest measured below it
    assert abs(slots.slowdown(4) - 0.048 / 0.020) < 1e-9
