"""How hard a request is: the probability that it needs a strong model, in [0, 1].

A logistic regression (scikit-learn) over hashed words of the request's last user turn and a
few numbers (prompt and output size, turns, media).  The router compares the estimate with
each model's declared quality level, like a strong/weak threshold router: a tier may take a
request when its quality is at least the difficulty (and the tenant's quality floor).

The built-in default is trained at start from :func:`builtin_examples`, a small labelled set
made from templates (easy: greetings, one-line facts, short rewrites; hard: proofs, multi-step
reasoning, code, long analyses).  Operators train their own from labelled JSONL
(``tiergate router train-difficulty FILE.jsonl``); it is saved in the data folder as JSON
(coefficients, not a pickle) with its held-out accuracy, and used from then on.

Scoring a request is a few dictionary lookups and a sum (tens of microseconds): the words are
hashed with CRC-32, which is stable across processes, unlike Python's ``hash``.
"""

from __future__ import annotations

import itertools
import math
import random
import re
import time
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from router._features import Features

BUCKETS = 1 << 12
NUMERIC = ("log_prompt", "log_output", "turns", "media", "code", "digits")
_WORD = re.compile(r"[a-z0-9_]+")
_DIGITS = re.compile(r"[0-9]")
_MAX_CHARS = 4000  # only this much of a long prompt is read (its start and end)


def words(text: str) -> list[str]:
    """The words read of a text (lower case; of a long one, its start and end)."""
    if len(text) > _MAX_CHARS:
        text = text[: _MAX_CHARS // 2] + " " + text[-_MAX_CHARS // 2 :]
    return _WORD.findall(text.lower())


def vectorize(text: str, features: Features, read: list[str] | None = None) -> tuple[list[int], list[float]]:
    """Sparse feature vector: hashed words and word pairs (L2-normalised), then the numbers
    (``read``: the text's :func:`words`, when read already)."""
    read = words(text) if read is None else read
    tokens = set(read)
    tokens.update(f"{a} {b}" for a, b in itertools.pairwise(read))
    buckets = sorted({zlib.crc32(t.encode()) & (BUCKETS - 1) for t in tokens})
    weight = 1 / math.sqrt(len(buckets)) if buckets else 0.0
    values = [weight] * len(buckets)
    m = features.media
    numeric = (
        math.log1p(features.prompt_tokens) / 8,
        math.log1p(features.max_tokens or 256) / 8,
        min(features.turns, 20) / 20,
        min(1.0, m.images + m.videos + m.audio_clips),
        1.0 if "```" in text or "def " in text or "{" in text else 0.0,
        min(1.0, len(_DIGITS.findall(text, 0, 2000)) / 50),
    )
    indices = buckets + [BUCKETS + i for i in range(len(NUMERIC))]
    return indices, values + list(numeric)


class DifficultyModel(msgspec.Struct, kw_only=True):
    coef: list[float]  # BUCKETS + len(NUMERIC)
    intercept: float
    source: str = "built-in"
    trained_at: float = 0.0
    examples: int = 0
    metrics: dict[str, float] = msgspec.field(default_factory=dict)

    def estimate(self, text: str, features: Features) -> float:
        return self.score(vectorize(text, features))

    def score(self, vector: tuple[list[int], list[float]]) -> float:
        """The estimate for a vector :func:`vectorize` made (the quality model reads it too)."""
        indices, values = vector
        coef = self.coef
        z = self.intercept + sum(coef[i] * v for i, v in zip(indices, values, strict=True))
        return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


class LabelledExample(msgspec.Struct, kw_only=True):
    """One line of a training file: ``{"prompt": ...}`` or ``{"messages": [...]}``, and a label
    (1/0, true/false or "hard"/"easy"); ``max_tokens`` optional."""

    label: int | bool | str
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = None


def _text_of(example: LabelledExample) -> tuple[str, int]:
    if example.prompt is not None:
        return example.prompt, 1
    texts = []
    for message in example.messages or []:
        content = message.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p.get("text", "") for p in content if isinstance(p, dict)]
    return (texts[-1] if texts else ""), len(example.messages or [])


def _label(value: int | bool | str) -> int:
    if isinstance(value, str):
        if value.lower() in ("hard", "strong", "1", "true"):
            return 1
        if value.lower() in ("easy", "weak", "0", "false"):
            return 0
        raise ValueError(f"label {value!r}: use 1/0, true/false or hard/easy")
    return int(bool(value))


def train(examples: Sequence[LabelledExample], source: str, seed: int = 0) -> DifficultyModel:
    """Fit the classifier; accuracy is measured on a held-out fifth first, then it is refit on all."""
    import numpy as np
    from scipy.sparse import csr_matrix
    from sklearn.linear_model import LogisticRegression

    rows, labels = [], []
    for example in examples:
        text, turns = _text_of(example)
        features = Features(len(text) // 4, example.max_tokens, turns, frozenset(), False)
        rows.append(vectorize(text, features))
        labels.append(_label(example.label))
    if len(set(labels)) < 2:
        raise ValueError("the examples need both labels (hard and easy)")
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    width = BUCKETS + len(NUMERIC)

    def matrix(ids: Iterable[int]) -> Any:
        ids = list(ids)
        data, cols, ptr = [], [], [0]
        for i in ids:
            cols += rows[i][0]
            data += rows[i][1]
            ptr.append(len(cols))
        return csr_matrix((data, cols, ptr), shape=(len(ids), width))

    y = np.asarray(labels)
    metrics: dict[str, float] = {}
    cut = int(len(order) * 0.8)
    held, fit_ids = order[cut:], order[:cut]
    if len(held) >= 5 and len(set(y[fit_ids])) == 2:
        model = LogisticRegression(C=4.0, max_iter=2000).fit(matrix(fit_ids), y[fit_ids])
        metrics["holdout_accuracy"] = float(model.score(matrix(held), y[held]))
        metrics["holdout_n"] = float(len(held))
    model = LogisticRegression(C=4.0, max_iter=2000).fit(matrix(order), y[order])
    return DifficultyModel(
        coef=[float(v) for v in model.coef_[0]],
        intercept=float(model.intercept_[0]),
        source=source,
        trained_at=time.time(),
        examples=len(rows),
        metrics=metrics,
    )


def read_examples(lines: Iterable[str]) -> list[LabelledExample]:
    decoder = msgspec.json.Decoder(LabelledExample)
    out = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            try:
                example = decoder.decode(line)
                _label(example.label)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
                raise ValueError(f"line {number}: {exc}") from exc
            out.append(example)
    return out


# -- the built-in examples --------------------------------------------------------------------

_EASY = (
    "Say hello.",
    "Hi! How are you today?",
    "What is the capital of {place}?",
    "Translate '{thing}' into French.",
    "Give me a synonym for {adj}.",
    "What colour is {thing}?",
    "Write one short sentence about {thing}.",
    "Is {thing} a fruit? Answer yes or no.",
    "Spell {thing} backwards.",
    "Thanks, that helps!",
    "What day comes after Monday?",
    "Name three animals that live in {place}.",
    "Fix the typo: 'teh {thing}'.",
    "Summarise in five words: the {thing} is {adj}.",
    "Reply with OK.",
    "Tell me a short joke about {thing}.",
    # Long is not hard: a small model writes a story or a description well enough.
    "Write a long story about {thing}, with several scenes.",
    "Write a travel guide to {place}: food, history, places to visit.",
    "Describe {thing} in detail, in several paragraphs.",
    "Write a poem about {thing}.",
)
_HARD = (
    "Prove that there are infinitely many primes of the form 4k+3, step by step.",
    "Write a Python function that parses {thing} files, handles malformed input, and add unit tests.",
    "Compare the economic policies of {place} over the last fifty years and argue which was more effective.",
    "Derive the closed form of the sum of k^3 for k=1..n and prove it by induction.",
    "Design a distributed rate limiter for {thing} with exact semantics across regions; discuss trade-offs.",
    "Debug this code and explain the race condition: ```def f(x): global n; n += x; return n```",
    "Explain why {adj} {thing} matter in quantum field theory, with the relevant equations.",
    "Write an essay analysing the causes of the decline of {place}'s industry, weighing the evidence.",
    "Solve: a train leaves {place} at 3pm at 80 km/h, another at 4pm at 120 km/h; "
    "when and where do they meet? Show all reasoning.",
    "Refactor this 300-line module into smaller classes and justify each design decision: {thing}.",
    "Given the constraints below, find the optimal schedule and prove it is optimal: {thing}.",
    "Implement a lock-free queue in C++ and reason about its memory ordering.",
    "Analyse the time complexity of merge sort versus quicksort on nearly sorted {thing}; prove the bounds.",
    "Translate this legal contract about {thing} into plain English, flag every clause that is ambiguous, "
    "and suggest fixes.",
    "Plan a multi-step data migration for {thing} with zero downtime, including rollback steps.",
    "What are the second-order effects of raising interest rates in {place}? Reason through each sector.",
)
_FILL = {
    "place": ("France", "Japan", "Kenya", "Peru", "Norway", "Canada", "India", "Egypt"),
    "thing": ("the sky", "a banana", "CSV", "invoices", "logs", "a river", "graphs", "tables", "coffee"),
    "adj": ("happy", "large", "quick", "strange", "bright", "gauge", "old"),
}


def builtin_examples(per_template: int = 6, seed: int = 7) -> list[LabelledExample]:
    rng = random.Random(seed)
    out = []
    for label, templates, out_tokens in ((0, _EASY, (16, 64, 256)), (1, _HARD, (64, 256, 1024))):
        for template in templates:
            for _ in range(per_template):
                text = template.format(**{k: rng.choice(v) for k, v in _FILL.items()})
                out.append(LabelledExample(label=label, prompt=text, max_tokens=rng.choice(out_tokens)))
    return out


def builtin_model() -> DifficultyModel:
    return train(builtin_examples(), source="built-in")
