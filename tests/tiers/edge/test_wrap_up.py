"""A constrained answer near its token budget is wrapped up (tiers/edge/_decode.py): driven by a model
that always wants more — digits after digits, letters in every string, blank space where the grammar
allows it — each of the structured-output schemas the edge is tried with still ends with ``stop`` and
valid JSON within ``max_tokens``; without the wrap-up the same model runs out.  llguidance on a
one-byte-per-token vocabulary (tests/tiers/edge/test_grammar.py), greedy picks, no model."""

from __future__ import annotations

import json
import threading
from typing import Any

import jsonschema
import numpy as np
import pytest

from tests.structured_cases import CASES, response_format
from tests.tiers.edge.test_grammar import TOKENIZER, Bytes
from tiers import Finished, Generation, TextDelta
from tiers.edge import _decode
from tiers.edge._decode import Decoder, Vocabulary, wrapped_up

BUDGET = 192
# What the greedy model wants most, first to last: brackets (in a string they are more of it, as a
# temperature of 0.8 once wrote them), digits, letters, blank space, an emoji; a quote last of all.
WANTS = b"]}9a\n \xf0\x9f\x98\x80.e-1"


def _row() -> np.ndarray[Any, np.dtype[np.float32]]:
    row = np.full(257, -10.0, dtype=np.float32)
    for rank, byte in enumerate(WANTS):
        row[byte] = max(row[byte], 10.0 - rank)
    return row


class Greedy:
    """An engine whose every logits row is :func:`_row`."""

    def prefill(self, prompt: list[int]) -> tuple[np.ndarray[Any, Any], int]:
        return _row(), 0

    def advance(self, token: int) -> np.ndarray[Any, Any]:
        return _row()

    def rewind(self, length: int) -> None:
        pass


VOCAB = Vocabulary(
    pieces=[*Bytes().tokens[:256], b""], shown=Bytes().tokens, end=frozenset({256}), guide=TOKENIZER
)


def answer(schema: dict[str, Any], name: str) -> tuple[str, str]:
    gen = Generation(messages=[], response_format=response_format(name, schema), temperature=0.0)
    events: list[Any] = []
    assert Decoder("edge", Greedy(), VOCAB, gen).run([1, 2], BUDGET, events.append, threading.Event())
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    finished = [e for e in events if isinstance(e, Finished)]
    assert finished[0].usage.completion_tokens <= BUDGET
    return text, finished[0].reason


@pytest.mark.parametrize(("name", "schema"), [(name, schema) for name, _, schema in CASES])
def test_an_answer_that_always_wants_more_still_ends_within_its_budget(
    name: str, schema: dict[str, Any]
) -> None:
    text, reason = answer(schema, name)
    assert reason == "stop", text
    jsonschema.validate(json.loads(text), schema)


def ran_out() -> list[str]:
    return [name for name, _, schema in CASES if answer(schema, name)[1] == "length"]


def test_without_the_wrap_up_the_same_model_runs_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_decode, "WRAP_UP", 0)
    assert {"city", "person", "nested"} <= set(ran_out())


def test_a_wrap_up_that_takes_brackets_before_quotes_runs_out_in_a_string(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quoted, closers, *_ = VOCAB.wrap_up
    monkeypatch.setitem(VOCAB.__dict__, "wrap_up", (closers | quoted,))  # the first wrap-up, closers alone
    assert {"city", "person", "nested"} <= set(ran_out())


def test_a_wrap_up_prefers_closing_then_separating_then_anything_but_growing() -> None:
    def allowed(*pieces: bytes) -> np.ndarray[Any, np.dtype[np.bool_]]:
        mask = np.zeros(257, dtype=np.bool_)
        for piece in pieces:
            mask[piece[0]] = True
        return mask

    def picked(*pieces: bytes) -> set[bytes]:
        return {bytes([t]) for t in np.flatnonzero(wrapped_up(allowed(*pieces), VOCAB))}

    assert picked(b"9", b",", b"}", b"]", b'"') == {b'"'}  # in a string only the quote closes it
    assert picked(b"9", b",", b"}", b" ") == {b"}"}
    assert picked(b"9", b",", b" ") == {b","}
    assert picked(b"9", b".", b" ", b"t", b"{") == {b"t", b"{"}
    assert picked(b"9", b"-") == {b"9", b"-"}  # a number's first character: nothing else to take
    end = np.zeros(257, dtype=np.bool_)
    end[[256, ord("9")]] = True
    assert np.flatnonzero(wrapped_up(end, VOCAB)).tolist() == [256]
