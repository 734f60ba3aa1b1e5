from __future__ import annotations

import router
from router import BreakerBoard, BreakerConfig, BreakerState, CircuitBreaker
from tiers import Modality

IMAGE = frozenset({Modality.TEXT, Modality.IMAGE})
TEXT = frozenset({Modality.TEXT})
CONFIG = BreakerConfig(consecutive_failures=3, error_rate=0.5, min_calls=6, window_s=10, cooldown_s=5)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_opens_after_consecutive_failures_and_not_before() -> None:
    breaker = CircuitBreaker(CONFIG, Clock())
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.state() is BreakerState.CLOSED
    breaker.record_failure("HTTP 500")
    assert breaker.state() is BreakerState.OPEN
    assert not breaker.acquire()
    assert breaker.last_failure == "HTTP 500"


def test_a_success_resets_the_consecutive_count() -> None:
    breaker = CircuitBreaker(CONFIG, Clock())
    for _ in range(2):
        breaker.record_failure()
    breaker.record_success()
    for _ in range(2):
        breaker.record_failure()
    assert breaker.state() is BreakerState.CLOSED


def test_opens_on_error_rate_within_the_window_only() -> None:
    clock = Clock()
    breaker = CircuitBreaker(CONFIG, clock)
    for _ in range(3):  # ok, fail, ok, fail, ok, fail: 50% over 6 calls, never 2 in a row
        breaker.record_success()
        breaker.record_failure()
    assert breaker.state() is BreakerState.OPEN

    slow = CircuitBreaker(CONFIG, clock)
    for _ in range(3):
        slow.record_failure()
        slow.record_success()
        clock.now += 4  # older outcomes leave the 10 s window
    assert slow.state() is BreakerState.CLOSED


def test_half_open_after_cooldown_lets_limited_probes_then_closes_on_success() -> None:
    clock = Clock()
    breaker = CircuitBreaker(CONFIG, clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 4.9
    assert breaker.state() is BreakerState.OPEN
    clock.now += 0.2
    assert breaker.state() is BreakerState.HALF_OPEN
    assert breaker.acquire()
    assert not breaker.acquire()  # one probe at a time
    breaker.record_success()
    assert breaker.state() is BreakerState.CLOSED
    assert breaker.acquire()


def test_failed_probe_reopens_for_another_cooldown() -> None:
    clock = Clock()
    breaker = CircuitBreaker(CONFIG, clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 5
    assert breaker.acquire()
    breaker.record_failure()
    assert breaker.state() is BreakerState.OPEN
    clock.now += 4
    assert breaker.state() is BreakerState.OPEN


def test_a_cancelled_probe_gives_its_slot_back() -> None:
    clock = Clock()
    breaker = CircuitBreaker(CONFIG, clock)
    for _ in range(3):
        breaker.record_failure()
    clock.now += 5
    assert breaker.acquire()
    breaker.release()
    assert breaker.acquire()


def test_image_failures_never_open_text_and_text_requests_never_consult_image() -> None:
    clock = Clock()
    changes: list[tuple[str, Modality, BreakerState]] = []
    board = BreakerBoard(CONFIG, clock, on_transition=lambda *c: changes.append(c))
    for _ in range(3):
        assert board.acquire("cloud", IMAGE)
        board.record("cloud", IMAGE, ok=False, why="HTTP 500")
    assert board.open_modalities("cloud") == {Modality.IMAGE}
    assert not board.acquire("cloud", IMAGE)
    assert board.acquire("cloud", TEXT)
    board.record("cloud", TEXT, ok=True)
    assert board.open_modalities("edge") == frozenset()
    assert changes == [("cloud", Modality.IMAGE, BreakerState.OPEN)]
    clock.now += 5
    assert board.acquire("cloud", IMAGE)
    board.record("cloud", IMAGE, ok=True)
    assert changes[1:] == [
        ("cloud", Modality.IMAGE, BreakerState.HALF_OPEN),
        ("cloud", Modality.IMAGE, BreakerState.CLOSED),
    ]
    states = {(s.tier, s.modality): s.state for s in board.snapshot()}
    assert states == {
        ("cloud", Modality.IMAGE): BreakerState.CLOSED,
        ("cloud", Modality.TEXT): BreakerState.CLOSED,
    }


def test_disabled_board_lets_everything_through() -> None:
    board = BreakerBoard(BreakerConfig(enabled=False, consecutive_failures=1))
    board.record("cloud", IMAGE, ok=False)
    assert board.acquire("cloud", IMAGE)
    assert board.open_modalities("cloud") == frozenset()


def test_attributed_charges_media_else_text() -> None:
    assert router.attributed(IMAGE) == {Modality.IMAGE}
    assert router.attributed(TEXT) == {Modality.TEXT}


def test_a_state_reported_by_another_gateway_is_taken_and_told() -> None:
    clock, changes = Clock(), []
    board = BreakerBoard(CONFIG, clock, on_transition=lambda *c: changes.append(c))
    # Opened elsewhere 2 s ago: open here, and half-open when the cool-down (5 s) runs out there.
    board.apply("cloud", Modality.IMAGE, BreakerState.OPEN, opened_ago_s=2.0, why="HTTP 500 at a peer")
    assert Modality.IMAGE in board.open_modalities("cloud")
    assert changes == [("cloud", Modality.IMAGE, BreakerState.OPEN)]
    assert board.snapshot()[0].last_failure == "HTTP 500 at a peer"
    clock.now += 3.0
    assert board.snapshot()[0].state is BreakerState.HALF_OPEN
    # A peer's probe succeeded: closed here too.
    board.apply("cloud", Modality.IMAGE, BreakerState.CLOSED)
    assert board.open_modalities("cloud") == frozenset()
    assert changes[-1] == ("cloud", Modality.IMAGE, BreakerState.CLOSED)


def test_an_older_opening_does_not_shorten_a_newer_one() -> None:
    clock = Clock()
    breaker = CircuitBreaker(CONFIG, clock)
    for _ in range(3):
        breaker.record_failure()
    breaker.force_open(opened_ago_s=4.0)  # a peer opened it 4 s ago; ours is newer
    clock.now += 4.0
    assert breaker.state() is BreakerState.OPEN
