"""Failed authentications counted per client address: past ``limit`` failures within ``window_s``,
that address is refused (429 with Retry-After) until its oldest counted failure leaves the window,
whatever key it sends, so keys cannot be guessed at speed. Bounded in memory: at most
``max_addresses`` addresses are tracked (the oldest dropped first)."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable

from gateway.errors import RateLimited

MAX_ADDRESSES = 100_000


class FailureThrottle:
    def __init__(
        self,
        limit: int,
        window_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        self._limit = limit
        self._window_s = window_s
        self._clock = clock
        self._max = max_addresses
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        return self._limit > 0

    def check(self, address: str | None, what: str = "authentication") -> None:
        """Raise :class:`RateLimited` while ``address`` is over its failures."""
        if not self.enabled or address is None:
            return
        failures = self._failures.get(address)
        if failures is None:
            return
        now = self._clock()
        while failures and now - failures[0] >= self._window_s:
            failures.popleft()
        if not failures:
            del self._failures[address]
            return
        if len(failures) >= self._limit:
            wait = self._window_s - (now - failures[0])
            raise RateLimited(
                f"too many failed {what} attempts from this address; retry in {max(1, round(wait))} s",
                retry_after_s=wait,
                reason="failed_auth",
            )

    def failed(self, address: str | None) -> None:
        if not self.enabled or address is None:
            return
        failures = self._failures.pop(address, None) or deque(maxlen=self._limit)
        failures.append(self._clock())
        self._failures[address] = failures  # most recent last
        while len(self._failures) > self._max:
            self._failures.popitem(last=False)
