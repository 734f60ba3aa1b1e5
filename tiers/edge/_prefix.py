"""Saved prompt states of one engine instance, found by the longest shared token prefix.

A prompt that starts like one evaluated before (a shared system prompt, an earlier turn of the same
conversation) restores that state and evaluates only the tokens after the shared part.  The engine keeps
its live context too (the last request's); the store matters when other prompts came in between.  Bounded
in bytes, least recently used out first.  Used on the engine's worker thread only.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Generic, TypeVar

State = TypeVar("State")

# Prompts shorter than this are cheap to evaluate again: not worth a saved state.
MIN_PROMPT_TOKENS = 64
# A saved state is worth restoring when it covers this many more tokens than the live context does.
MIN_GAIN_TOKENS = 16


def shared_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixStore(Generic[State]):
    def __init__(self, capacity_bytes: int) -> None:
        self.capacity_bytes = capacity_bytes
        self._entries: collections.OrderedDict[tuple[int, ...], tuple[State, int]] = collections.OrderedDict()
        self._bytes = 0
        self.hits = 0  # restores, for operators and the bench

    @property
    def enabled(self) -> bool:
        return self.capacity_bytes > 0

    def best(self, prompt: Sequence[int]) -> tuple[int, State | None]:
        """The saved state sharing the longest prefix with ``prompt``, and how many tokens it shares."""
        found: tuple[int, tuple[int, ...] | None] = (0, None)
        for saved in self._entries:
            n = shared_prefix(saved, prompt)
            if n > found[0]:
                found = (n, saved)
        length, key = found
        if key is None:
            return 0, None
        self._entries.move_to_end(key)
        return length, self._entries[key][0]

    def wants(self, prompt: Sequence[int]) -> bool:
        """Whether saving the state after ``prompt`` adds much: long enough, and not mostly covered by a
        saved state already (a shared system prompt is saved once, not once per question)."""
        if not self.enabled or len(prompt) < MIN_PROMPT_TOKENS:
            return False
        covered = max((shared_prefix(key, prompt) for key in self._entries), default=0)
        return covered < len(prompt) // 2

    def put(self, tokens: Sequence[int], state: State, size: int) -> None:
        if size > self.capacity_bytes:
            return
        key = tuple(tokens)
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old[1]
        self._entries[key] = (state, size)
        self._bytes += size
        while self._bytes > self.capacity_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


class SlotTable:
    """Which tokens each prefix slot of a batched engine holds (a slot: an extra sequence id of one
    unified llama.cpp cache, tiers/edge/_batch.py); the engine moves the cells, this picks the slot.
    A background request's tokens fill only a free slot or one another background request filled:
    a live prompt kept in a slot is not pushed out by a batch line that shares its system prompt."""

    def __init__(self, ids: Sequence[int]) -> None:
        self.ids = list(ids)
        self._held: collections.OrderedDict[int, tuple[int, ...]] = collections.OrderedDict()
        self._background: set[int] = set()

    def best(self, prompt: Sequence[int]) -> tuple[int | None, int]:
        """The slot sharing the most of ``prompt`` (all but its last token at most) and how much,
        when that is worth it (``MIN_GAIN_TOKENS``); else (None, 0)."""
        best, found = 0, None
        for slot, tokens in self._held.items():
            n = min(shared_prefix(tokens, prompt), len(prompt) - 1)
            if n > best:
                best, found = n, slot
        if found is None or best < MIN_GAIN_TOKENS:
            return None, 0
        self._held.move_to_end(found)
        return found, best

    def place(self, tokens: Sequence[int], background: bool) -> int | None:
        """The slot that keeps ``tokens`` now (its old tokens forgotten), or None: the one sharing
        the most with them (the newer holds the shared part too), else a free one, else the least
        recently used."""
        if len(tokens) < MIN_GAIN_TOKENS:
            return None
        mine = [s for s in self._held if not background or s in self._background]
        sharing = max(mine, key=lambda slot: shared_prefix(self._held[slot], tokens), default=None)
        free = [s for s in self.ids if s not in self._held]
        if sharing is not None and shared_prefix(self._held[sharing], tokens) >= MIN_GAIN_TOKENS:
            slot = sharing
        elif free or mine:
            slot = free[0] if free else mine[0]
        else:
            return None
        self._held.pop(slot, None)
        self._held[slot] = tuple(tokens)
        if background:
            self._background.add(slot)
        else:
            self._background.discard(slot)
        return slot

    def clear(self) -> None:
        self._held.clear()
        self._background.clear()
