"""Picking the next token from a logits row with numpy, and turning token ids back into text piece by
piece (for engines that hand back raw logits, such as ONNX Runtime)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

TOP_K = 40  # the same cut-offs the llama.cpp tier uses
MIN_P = 0.05


class Sampler:
    """Greedy at temperature 0, else top-k, then min-p, then top-p (nucleus) sampling; seeded."""

    def __init__(
        self,
        temperature: float,
        top_p: float,
        seed: int | None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
    ) -> None:
        self.temperature = temperature
        self.top_p = top_p
        # numpy refuses negative seeds; OpenAI's seed is any int64
        self._rng = np.random.default_rng(None if seed is None else seed % 2**64)
        self._presence = presence_penalty
        self._frequency = frequency_penalty
        self._seen: Counter[int] = Counter()

    def pick(self, logits: np.ndarray[Any, np.dtype[np.float32]]) -> int:
        if self._seen and (self._presence or self._frequency):
            ids = np.fromiter(self._seen.keys(), dtype=np.int64)
            counts = np.fromiter(self._seen.values(), dtype=np.float32)
            logits = logits.copy()
            logits[ids] -= self._presence + self._frequency * counts
        token = self._choose(logits)
        self._seen[token] += 1
        return token

    def _choose(self, logits: np.ndarray[Any, np.dtype[np.float32]]) -> int:
        if self.temperature <= 0:
            return int(logits.argmax())
        k = min(TOP_K, logits.shape[0])
        idx = np.argpartition(logits, -k)[-k:]
        scaled = logits[idx].astype(np.float64) / self.temperature
        order = np.argsort(-scaled)
        idx, scaled = idx[order], scaled[order]
        probs = np.exp(scaled - scaled[0])
        probs /= probs.sum()
        keep = probs >= MIN_P * probs[0]
        cut = int(np.searchsorted(np.cumsum(probs), self.top_p)) + 1
        keep[cut:] = False
        probs = np.where(keep, probs, 0.0)
        probs /= probs.sum()
        return int(idx[self._rng.choice(probs.shape[0], p=probs)])


class IncrementalDetokenizer:
    """Text for each new token id, never splitting a UTF-8 character or a merged word piece.

    Decodes a short window of recent ids twice (with and without the newest) and emits the difference
    once it no longer ends in a replacement character (the usual trick for byte-level BPE).
    """

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        return str(self._tokenizer.decode(ids, skip_special_tokens=True))

    def feed(self, token: int) -> str:
        self._ids.append(token)
        before = self._decode(self._ids[self._prefix : self._read])
        now = self._decode(self._ids[self._prefix :])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._ids)
            return now[len(before) :]
        return ""

    def flush(self) -> str:
        before = self._decode(self._ids[self._prefix : self._read])
        now = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return now[len(before) :]
