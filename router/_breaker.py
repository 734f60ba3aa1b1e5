"""Circuit breakers per (tier, modality): a pure state machine with an injectable clock.

    CLOSED ──(consecutive failures ≥ N, or error rate ≥ r over ≥ m calls in the window)──▶ OPEN
    OPEN ──(cool-down elapsed)──▶ HALF_OPEN: at most ``half_open_probes`` calls in flight
    HALF_OPEN ──(a probe succeeds)──▶ CLOSED        HALF_OPEN ──(a probe fails)──▶ OPEN

A call is attributed to the modalities that make it special: its media modalities
when it carries any, else text.  So a failing vision path opens only ``image``
breakers, and text-only calls never consult them.  What counts as a failure is
the caller's business (the gateway counts timeouts, 5xx and unreachable
servers, not a client's own 4xx).  No I/O, no HTTP: the clock is a parameter.
"""

from __future__ import annotations

import enum
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec

from tiers import Modality

Clock = Callable[[], float]


class BreakerConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    consecutive_failures: int = 5
    # Error-rate trip: at least ``min_calls`` outcomes within ``window_s``, failing ≥ ``error_rate``.
    error_rate: float = 0.5
    min_calls: int = 10
    window_s: float = 30.0
    cooldown_s: float = 10.0
    half_open_probes: int = 1


class BreakerState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


def attributed(modalities: Iterable[Modality]) -> frozenset[Modality]:
    """The modalities a call's outcome is charged to: its media, or text when it has none."""
    media = frozenset(modalities) - {Modality.TEXT}
    return media or frozenset({Modality.TEXT})


class CircuitBreaker:
    def __init__(self, config: BreakerConfig, clock: Clock = time.monotonic) -> None:
        self._config = config
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._consecutive = 0
        self._outcomes: deque[tuple[float, bool]] = deque()  # (when, ok) within the window
        self._opened_at = 0.0
        self._probes = 0
        self.last_failure = ""

    def state(self) -> BreakerState:
        """The state now (an open breaker whose cool-down is over reads as half-open)."""
        if self._state is BreakerState.OPEN and self._clock() - self._opened_at >= self._config.cooldown_s:
            self._state = BreakerState.HALF_OPEN
            self._probes = 0
        return self._state

    def available(self) -> bool:
        """Would a call be let through now? (Does not take a probe slot.)"""
        state = self.state()
        if state is BreakerState.HALF_OPEN:
            return self._probes < self._config.half_open_probes
        return state is BreakerState.CLOSED

    def acquire(self) -> bool:
        """Let one call through, taking a probe slot when half-open; False: treat as open."""
        if not self.available():
            return False
        if self._state is BreakerState.HALF_OPEN:
            self._probes += 1
        return True

    def release(self) -> None:
        """A call that was let through ended without an outcome (cancelled by its client)."""
        if self._state is BreakerState.HALF_OPEN and self._probes:
            self._probes -= 1

    def record_success(self) -> None:
        self._consecutive = 0
        if self.state() is not BreakerState.CLOSED:
            self._close()
            return
        self._remember(ok=True)

    def record_failure(self, why: str = "") -> None:
        self.last_failure = why
        state = self.state()
        if state is BreakerState.HALF_OPEN:
            self._open()
            return
        if state is BreakerState.OPEN:
            return
        self._consecutive += 1
        self._remember(ok=False)
        failed = sum(1 for _, ok in self._outcomes if not ok)
        c = self._config
        if self._consecutive >= c.consecutive_failures or (
            len(self._outcomes) >= c.min_calls and failed / len(self._outcomes) >= c.error_rate
        ):
            self._open()

    def force_open(self, opened_ago_s: float = 0.0, why: str = "") -> None:
        """Open because another gateway saw the path fail ``opened_ago_s`` ago (its cool-down runs
        from then); an open breaker keeps the later of the two openings."""
        opened_at = self._clock() - max(0.0, opened_ago_s)
        if self._state is BreakerState.OPEN and self._opened_at >= opened_at:
            return
        self._open()
        self._opened_at = opened_at
        self.last_failure = why or self.last_failure

    def force_close(self) -> None:
        """Close because another gateway's probe succeeded."""
        if self._state is not BreakerState.CLOSED:
            self._close()

    def _remember(self, *, ok: bool) -> None:
        now = self._clock()
        self._outcomes.append((now, ok))
        horizon = now - self._config.window_s
        while self._outcomes and self._outcomes[0][0] < horizon:
            self._outcomes.popleft()

    def _open(self) -> None:
        self._state = BreakerState.OPEN
        self._opened_at = self._clock()
        self._probes = 0
        self._consecutive = 0
        self._outcomes.clear()

    def _close(self) -> None:
        self._state = BreakerState.CLOSED
        self._probes = 0
        self._consecutive = 0
        self._outcomes.clear()


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    tier: str
    modality: Modality
    state: BreakerState
    last_failure: str

    def as_dict(self) -> dict[str, str]:
        return {
            "tier": self.tier,
            "modality": self.modality.value,
            "state": self.state.value,
            "last_failure": self.last_failure,
        }


Transition = Callable[[str, Modality, BreakerState], None]


class BreakerBoard:
    """Every (tier, modality) breaker, made on first use; tells of each state change."""

    def __init__(
        self,
        config: BreakerConfig,
        clock: Clock = time.monotonic,
        on_transition: Transition | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._on_transition = on_transition
        self._breakers: dict[tuple[str, Modality], CircuitBreaker] = {}
        self._seen: dict[tuple[str, Modality], BreakerState] = {}

    def _get(self, tier: str, modality: Modality) -> CircuitBreaker:
        key = (tier, modality)
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = CircuitBreaker(self._config, self._clock)
            self._seen[key] = BreakerState.CLOSED
        return breaker

    def _notice(self, tier: str, modality: Modality) -> None:
        key = (tier, modality)
        now = self._breakers[key].state()
        if now is not self._seen[key]:
            self._seen[key] = now
            if self._on_transition is not None:
                self._on_transition(tier, modality, now)

    def open_modalities(self, tier: str) -> frozenset[Modality]:
        """The modalities ``tier`` must not be sent now (their breakers are open, or half-open
        with every probe slot taken)."""
        if not self._config.enabled:
            return frozenset()
        out = set()
        for (name, m), breaker in self._breakers.items():
            if name == tier:
                available = breaker.available()
                self._notice(name, m)
                if not available:
                    out.add(m)
        return frozenset(out)

    def acquire(self, tier: str, modalities: Iterable[Modality]) -> bool:
        """Let one call through on ``tier`` for all its attributed modalities, or none."""
        if not self._config.enabled:
            return True
        taken: list[CircuitBreaker] = []
        for m in attributed(modalities):
            breaker = self._get(tier, m)
            if not breaker.acquire():
                for b in taken:
                    b.release()
                self._notice(tier, m)
                return False
            taken.append(breaker)
            self._notice(tier, m)
        return True

    def release(self, tier: str, modalities: Iterable[Modality]) -> None:
        for m in attributed(modalities):
            if (tier, m) in self._breakers:
                self._breakers[(tier, m)].release()

    def record(self, tier: str, modalities: Iterable[Modality], *, ok: bool, why: str = "") -> None:
        if not self._config.enabled:
            return
        for m in attributed(modalities):
            breaker = self._get(tier, m)
            if ok:
                breaker.record_success()
            else:
                breaker.record_failure(why)
            self._notice(tier, m)

    def apply(
        self, tier: str, modality: Modality, state: BreakerState, *, opened_ago_s: float = 0.0, why: str = ""
    ) -> None:
        """Take a state another gateway reported (open or closed); tells of the change like any other."""
        if not self._config.enabled:
            return
        breaker = self._get(tier, modality)
        if state is BreakerState.OPEN:
            breaker.force_open(opened_ago_s, why)
        elif state is BreakerState.CLOSED:
            breaker.force_close()
        self._notice(tier, modality)

    def last_failure(self, tier: str, modality: Modality) -> str:
        breaker = self._breakers.get((tier, modality))
        return breaker.last_failure if breaker is not None else ""

    def snapshot(self) -> list[BreakerSnapshot]:
        out = []
        for (tier, m), breaker in sorted(self._breakers.items()):
            state = breaker.state()
            self._notice(tier, m)
            out.append(BreakerSnapshot(tier, m, state, breaker.last_failure))
        return out
