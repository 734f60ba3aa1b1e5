"""The fresh labelled pair set (issue #24) is well formed, so a measurement on it counts what it claims.

The set was written blind to the near-miss guard and to the old set, so that hit and false-hit rates
measured on it are not rates the guard was tuned on. These checks keep it usable as such: one header
comment, exactly two kinds with at least 150 rows each, no repeated pair, short non-empty turns that
differ, and no sentence shared with the old set it is meant to be fresh against.
"""

from __future__ import annotations

from collections import Counter
from itertools import groupby
from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "data"
FRESH = DATA / "semantic_pairs_fresh.tsv"
OLD = DATA / "semantic_pairs.tsv"
KINDS = {"paraphrase", "near_miss"}
MAX_WORDS = 25


def rows(path: Path) -> list[list[str]]:
    """The data rows of a pair file, each split on tabs; comment lines are left out."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("\t") for line in lines if not line.startswith("#")]


def pair_key(first: str, second: str) -> frozenset[str]:
    """A pair compared without regard to order or case: (a, b) and (B, A) are the same pair."""
    return frozenset((first.strip().lower(), second.strip().lower()))


def test_one_comment_line_at_the_top() -> None:
    lines = FRESH.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#")
    assert "blind" in lines[0]
    assert [n for n, line in enumerate(lines) if line.startswith("#")] == [0]


def test_every_row_has_three_fields_and_a_known_kind() -> None:
    for row in rows(FRESH):
        assert len(row) == 3, row
        assert row[0] in KINDS, row


def test_each_kind_has_at_least_150_rows() -> None:
    counts = Counter(row[0] for row in rows(FRESH))
    assert set(counts) == KINDS
    assert all(counts[kind] >= 150 for kind in KINDS), counts


def test_turns_are_non_empty_short_and_differ() -> None:
    for _, first, second in rows(FRESH):
        for turn in (first, second):
            assert turn.strip(), (first, second)
            assert turn == turn.strip(), repr(turn)
            assert len(turn.split()) <= MAX_WORDS, turn
        assert first.strip().lower() != second.strip().lower(), first


def test_no_duplicate_pairs() -> None:
    keys = Counter(pair_key(first, second) for _, first, second in rows(FRESH))
    repeated = [sorted(key) for key, count in keys.items() if count > 1]
    assert repeated == []


def test_no_turn_is_taken_from_the_old_set() -> None:
    """Not a pair and not even one sentence of the old set: the guard may have been tuned on any of them."""
    old = {turn.strip().lower() for row in rows(OLD) if len(row) == 3 for turn in row[1:]}
    shared = [turn for _, first, second in rows(FRESH) for turn in (first, second) if turn.lower() in old]
    assert shared == []


def test_kinds_are_interleaved() -> None:
    """Rows are mixed, not grouped by kind, so a run over a prefix of the file sees both kinds."""
    runs = [len(list(run)) for _, run in groupby(row[0] for row in rows(FRESH))]
    assert max(runs) <= 8, max(runs)
