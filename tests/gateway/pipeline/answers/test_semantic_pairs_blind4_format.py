"""Format checks for tests/data/semantic_pairs_blind4.tsv, the fourth blind pair set (issue #24).

The file was written without reading the semantic guard, its docs or tests, or the earlier
pair sets. These checks keep it well-formed and disjoint from the earlier sets; when a
sentence is shared, only this file's sentence is reported.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[3] / "data"
BLIND4 = DATA / "semantic_pairs_blind4.tsv"
EARLIER = ("semantic_pairs.tsv", "semantic_pairs_fresh.tsv", "semantic_pairs_blind.tsv")
KINDS = {"paraphrase", "near_miss"}
MIN_PER_KIND = 150
MAX_WORDS = 25


def _rows(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("\t") for line in lines if line.strip() and not line.startswith("#")]


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def test_header_is_one_comment_line() -> None:
    lines = BLIND4.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#")
    assert "blind" in lines[0]
    assert not any(line.startswith("#") for line in lines[1:])


def test_rows_have_three_fields_and_known_kinds() -> None:
    rows = _rows(BLIND4)
    assert rows
    for row in rows:
        assert len(row) == 3, row
        assert row[0] in KINDS, row[0]


def test_each_kind_has_enough_rows() -> None:
    rows = _rows(BLIND4)
    for kind in KINDS:
        count = sum(1 for row in rows if row[0] == kind)
        assert count >= MIN_PER_KIND, (kind, count)


def test_turns_are_nonempty_short_and_differ() -> None:
    for _, first, second in _rows(BLIND4):
        for turn in (first, second):
            assert turn.strip(), (first, second)
            assert turn == turn.strip(), turn
            assert len(turn.split()) <= MAX_WORDS, turn
        assert _norm(first) != _norm(second), first


def test_no_duplicate_pairs() -> None:
    seen: set[frozenset[str]] = set()
    for _, first, second in _rows(BLIND4):
        key = frozenset((_norm(first), _norm(second)))
        assert key not in seen, (first, second)
        seen.add(key)


def test_kinds_are_interleaved() -> None:
    kinds = [row[0] for row in _rows(BLIND4)]
    half = len(kinds) // 2
    for kind in KINDS:
        assert kind in kinds[:half]
        assert kind in kinds[half:]


def test_no_sentence_from_earlier_sets() -> None:
    earlier: set[str] = set()
    for name in EARLIER:
        path = DATA / name
        if path.exists():
            for row in _rows(path):
                earlier.update(_norm(turn) for turn in row[1:])
    shared = sorted(
        turn for _, first, second in _rows(BLIND4) for turn in (first, second) if _norm(turn) in earlier
    )
    assert not shared, f"sentences of this set found in an earlier set: {shared}"
