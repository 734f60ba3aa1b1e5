"""Format checks for the blind semantic-cache pair set (issue #24).

tests/data/semantic_pairs_blind.tsv is the third labelled set, written without
reading the guard or the earlier sets so that its hit and false-hit rates say
something nobody tuned for. These checks keep it well formed and keep it
disjoint from the earlier sets: a sentence shared with a set the guard was
tuned on would leak that tuning into the blind measurement.
"""

import subprocess
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[3] / "data"
BLIND = DATA / "semantic_pairs_blind.tsv"
KINDS = {"paraphrase", "near_miss"}
MIN_PER_KIND = 150
MAX_WORDS = 25
# The second set lives on branch `pairs` until the lead merges it.
FRESH_NAME = "semantic_pairs_fresh.tsv"
FRESH_COMMIT = "bb88266"


def _rows(text: str) -> list[list[str]]:
    """The data rows of a pair file: every non-blank line not starting with '#'."""
    return [line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")]


def _norm(sentence: str) -> str:
    """Case-insensitive, whitespace-normalised form used to compare sentences."""
    return " ".join(sentence.lower().split())


def _sentences(text: str) -> set[str]:
    return {_norm(turn) for row in _rows(text) for turn in row[1:]}


def _fresh_text() -> str | None:
    """The second set's text: from the tree once merged, else from its commit."""
    path = DATA / FRESH_NAME
    if path.exists():
        return path.read_text(encoding="utf-8")
    result = subprocess.run(
        ["git", "show", f"{FRESH_COMMIT}:tests/data/{FRESH_NAME}"],
        cwd=DATA,
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout if result.returncode == 0 else None


@pytest.fixture(scope="module")
def blind_text() -> str:
    return BLIND.read_text(encoding="utf-8")


def test_header_is_one_comment_line(blind_text: str) -> None:
    lines = blind_text.splitlines()
    assert lines[0].startswith("#") and "blind" in lines[0]
    assert not any(line.startswith("#") for line in lines[1:])


def test_rows_have_three_fields_and_known_kinds(blind_text: str) -> None:
    for row in _rows(blind_text):
        assert len(row) == 3, row
        assert row[0] in KINDS, row


def test_each_kind_has_enough_rows(blind_text: str) -> None:
    kinds = [row[0] for row in _rows(blind_text)]
    for kind in KINDS:
        assert kinds.count(kind) >= MIN_PER_KIND, kind


def test_turns_are_nonempty_short_and_distinct(blind_text: str) -> None:
    for _kind, first, second in _rows(blind_text):
        for turn in (first, second):
            assert turn.strip(), (first, second)
            assert len(turn.split()) <= MAX_WORDS, turn
        assert _norm(first) != _norm(second), first


def test_no_duplicate_pairs(blind_text: str) -> None:
    pairs = [frozenset((_norm(first), _norm(second))) for _kind, first, second in _rows(blind_text)]
    assert len(pairs) == len(set(pairs))


def test_no_sentence_is_reused_across_pairs(blind_text: str) -> None:
    """A sentence stored by one pair must not be the probe of another pair."""
    turns = [_norm(turn) for row in _rows(blind_text) for turn in row[1:]]
    assert len(turns) == len(set(turns))


def test_kinds_are_interleaved(blind_text: str) -> None:
    kinds = [row[0] for row in _rows(blind_text)]
    half = len(kinds) // 2
    for kind in KINDS:
        assert 0 < kinds[:half].count(kind) < half, kind


def _own_sentences_in(blind_text: str, other_text: str) -> list[str]:
    """Sentences of the blind set that also occur in another set (only ours are reported)."""
    other = _sentences(other_text)
    return sorted({turn for row in _rows(blind_text) for turn in row[1:] if _norm(turn) in other})


def test_disjoint_from_the_original_set(blind_text: str) -> None:
    original = (DATA / "semantic_pairs.tsv").read_text(encoding="utf-8")
    assert _own_sentences_in(blind_text, original) == []


def test_disjoint_from_the_fresh_set(blind_text: str) -> None:
    fresh = _fresh_text()
    if fresh is None:
        pytest.skip(f"{FRESH_NAME} is neither in the tree nor reachable at commit {FRESH_COMMIT}")
    assert _own_sentences_in(blind_text, fresh) == []
