"""Picking the next token from a logits row with numpy, its log-probabilities, and turning token ids
back into text piece by piece (the edge's decode loop, :mod:`tiers.edge._decode`, for both engines).

A logits row is shaped in vLLM's order before a token is picked: ``logit_bias``, then the penalties
(repetition over the prompt and the answer, presence and frequency over the answer), then the tokens
the caller bans (end of text before ``min_tokens``) and the grammar's mask, then the pick: greedy at
temperature 0, else top-k, then min-p, then top-p (nucleus) sampling, seeded.
"""

from __future__ import annotations

import bisect
import codecs
import itertools
import math
from collections import Counter
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

TOP_K = 40  # the cut-offs the llama.cpp tier has always used; a request's top_k / min_p replace them
MIN_P = 0.05
NEGLIGIBLE_LOG = float(np.log(1e-6))  # tokens less likely than this, relative to the best, are never picked
FEW_LIKELY = 1024  # up to this many likely tokens, the top k is found among them only
NEG_INF = np.float32(-np.inf)

Row = np.ndarray[Any, np.dtype[np.float32]]


class Sampler:
    """Shapes a logits row and picks a token from it (see the module docstring for the order)."""

    def __init__(
        self,
        temperature: float,
        top_p: float,
        seed: int | None,
        presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0,
        *,
        top_k: int | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        logit_bias: dict[int, float] | None = None,
        prompt: Sequence[int] = (),
    ) -> None:
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = TOP_K if top_k is None else top_k  # 0 or less: no top-k cut (vLLM's -1)
        self.min_p = MIN_P if min_p is None else min_p
        # numpy refuses negative seeds; OpenAI's seed is any int64
        self._rng = np.random.default_rng(None if seed is None else seed % 2**64)
        self._presence = presence_penalty
        self._frequency = frequency_penalty
        self._repetition = repetition_penalty if repetition_penalty and repetition_penalty != 1.0 else 0.0
        self._prompt_ids = np.unique(np.asarray(prompt, dtype=np.int64)) if self._repetition else None
        bias = logit_bias or {}
        self._bias_ids = np.fromiter(bias.keys(), dtype=np.int64, count=len(bias))
        self._bias = np.fromiter(bias.values(), dtype=np.float32, count=len(bias))
        self._seen: Counter[int] = Counter()
        # whether rows are changed before the pick (else a pick reads them as they are)
        self.shapes = bool(self._bias.size or self._presence or self._frequency or self._repetition)

    def pick(
        self,
        logits: Row,
        *,
        banned: Collection[int] = (),
        allowed: np.ndarray[Any, np.dtype[np.bool_]] | None = None,
        owned: bool = False,
    ) -> int:
        """The next token. ``allowed`` (a grammar's mask, one flag per token id) wins over ``banned``
        when nothing is left of both. ``owned``: the row may be changed in place."""
        if self.shapes or banned or allowed is not None:
            logits = logits if owned else logits.copy()
            self._shape(logits)
            if banned:
                kept = logits[list(banned)].copy()
                logits[list(banned)] = -np.inf
            if allowed is not None:
                _mask(logits, allowed)
                if banned and not np.isfinite(logits.max()):  # the grammar allows only the end now
                    logits[list(banned)] = kept
                    _mask(logits, allowed)
        token = self._choose(logits)
        self._seen[token] += 1
        return token

    def _shape(self, logits: Row) -> None:
        if self._bias.size:
            inside = self._bias_ids < logits.shape[0]
            logits[self._bias_ids[inside]] += self._bias[inside]
        if self._repetition:
            ids = self._repeated()
            values = logits[ids]
            logits[ids] = np.where(values > 0, values / self._repetition, values * self._repetition)
        if self._seen and (self._presence or self._frequency):
            ids = np.fromiter(self._seen.keys(), dtype=np.int64)
            counts = np.fromiter(self._seen.values(), dtype=np.float32)
            logits[ids] -= self._presence + self._frequency * counts

    def _repeated(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        assert self._prompt_ids is not None
        if not self._seen:
            return self._prompt_ids
        answer = np.fromiter(self._seen.keys(), dtype=np.int64)
        return np.union1d(self._prompt_ids, answer)

    def _choose(self, logits: Row) -> int:
        if self.temperature <= 0:
            return int(logits.argmax())
        # Only tokens within a millionth of the likeliest's probability can matter: finding them is one
        # pass over the row, a third of what a top-k partition of the whole row costs.  (When fewer than
        # top_k are that likely, the rest, each under 1e-6 of the best, are left out of the top-p sum: at
        # most 4e-5 of it with top_k 40.)  The few candidates are then weighed in plain Python: on a
        # handful of numbers each numpy call costs more than the arithmetic.
        size = logits.shape[0]
        k = min(self.top_k, size) if self.top_k > 0 else size
        idx = np.flatnonzero(logits >= logits.max() + self.temperature * NEGLIGIBLE_LOG)
        if idx.shape[0] > FEW_LIKELY:  # a flat row: the whole row's top k
            idx = np.argpartition(logits, -k)[-k:] if k < size else np.arange(size)
        elif idx.shape[0] > k:
            idx = idx[np.argpartition(logits[idx], -k)[-k:]]
        return self._draw(idx.tolist(), logits[idx].tolist())

    def _draw(self, ids: list[int], values: list[float]) -> int:
        """min-p (relative to the best), then top-p over the candidates' normalised probabilities, then
        one seeded draw: what ``Generator.choice(p=...)`` does, one uniform number per pick."""
        ranked = sorted(zip(values, ids, strict=True), reverse=True)
        best = ranked[0][0]
        weights = [math.exp((v - best) / self.temperature) for v, _ in ranked]
        total = sum(weights)
        kept: list[float] = []
        mass = 0.0
        for w in weights:  # descending: once one fails min-p, all after it do
            if w < self.min_p:
                break
            kept.append(w)
            mass += w / total
            if mass >= self.top_p:
                break
        cdf = list(itertools.accumulate(kept))
        u = self._rng.random() * cdf[-1]
        return ranked[min(bisect.bisect_right(cdf, u), len(kept) - 1)][1]


def _mask(logits: Row, allowed: np.ndarray[Any, np.dtype[np.bool_]]) -> None:
    size = min(logits.shape[0], allowed.shape[0])
    np.copyto(logits[:size], NEG_INF, where=~allowed[:size])  # 2.5x faster than putmask
    logits[size:] = -np.inf


Flags = np.ndarray[Any, np.dtype[np.bool_]]


def allowed_tokens(bitmask: np.ndarray[Any, np.dtype[np.int32]], vocab: int) -> Flags:
    """One flag per token id from llguidance's bitmask (bit ``i % 32`` of word ``i // 32``): numpy's
    unpackbits, ~20 µs for 49k tokens where llguidance's own numpy kernel takes milliseconds."""
    bits = np.unpackbits(bitmask.reshape(-1).view(np.uint8), bitorder="little")
    return bits[:vocab].view(np.bool_)


def logprobs_of(raw: Row, token: int, top: int) -> tuple[float, list[tuple[int, float]]]:
    """The log-probability of ``token`` under the engine's own distribution (log-softmax of the raw
    row: vLLM's default ``raw_logprobs``), and the ``top`` likeliest tokens with theirs, best first."""
    row = raw.astype(np.float64)
    peak = row.max()
    norm = peak + np.log(np.exp(row - peak).sum())
    alternatives: list[tuple[int, float]] = []
    if top > 0:
        k = min(top, row.shape[0])
        idx = np.argpartition(row, -k)[-k:]
        idx = idx[np.argsort(-row[idx], kind="stable")]
        alternatives = [(int(i), float(row[i] - norm)) for i in idx]
    return float(row[token] - norm), alternatives


class TokenText:
    """Text for each new token id from its bytes, never splitting a UTF-8 character."""

    def __init__(self, pieces: Sequence[bytes]) -> None:
        self._pieces = pieces
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, token: int) -> str:
        return self._decoder.decode(self._pieces[token])

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
