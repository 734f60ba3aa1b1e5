"""The near-miss guard's checks, one flaw each (issue #24's fresh set found them): particles that flip
a question, numbers in another order, shared words that trade sides of a preposition, compounds and
word forms.  Without WordNet unless a case needs the judge; paraphrases beside the near misses show
that each check lets the harmless rewording through."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.pipeline.answers.semantic.guard import _related, agree, terms
from gateway.pipeline.answers.semantic.judge import judge_in
from gateway.settings import load_settings


def same(stored: str, asked: str) -> bool:
    return agree(terms(stored), terms(asked)) and agree(terms(asked), terms(stored))


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("How do I zoom in on a Mac?", "How do I zoom out on a Mac?"),
        ("How do I turn off notifications on iPhone?", "How do I turn on notifications on iPhone?"),
        ("How do I round a number up in Python?", "How do I round a number down in Python?"),
        ("How do I left join two tables in SQL?", "How do I right join two tables in SQL?"),
        ("Is coffee with milk bad for you?", "Is coffee without milk bad for you?"),
    ],
)
def test_a_particle_replaced_by_another_is_a_miss(stored: str, asked: str) -> None:
    assert not same(stored, asked)


def test_a_particle_added_or_dropped_is_not() -> None:
    assert same(
        "What is the weather in Rome?", "What is the weather like in Rome today?".replace(" today", "")
    )
    assert same("How do I log out of Gmail?", "How do I log out of my Gmail account?")
    assert same("Weather Rome", "What is the weather in Rome?")


def test_numbers_are_compared_in_order_and_spelled_ones_count() -> None:
    assert not same("What is 2 to the power of 8?", "What is 8 to the power of 2?")
    assert not same("What is 10 divided by 4?", "What is 4 divided by 10?")
    assert not same("Odds of rolling a 6 with one die?", "Odds of rolling a 6 with two dice?")
    assert same("What is 2 to the power of 8?", "Calculate 2 to the power of 8")
    assert same("How many legs do two spiders have?", "How many legs have 2 spiders?")


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("How many miles are in a kilometer?", "How many kilometers are in a mile?"),
        ("How do I convert a list to a set in Python?", "How do I convert a set to a list in Python?"),
        ("How many euros do I get for one US dollar?", "How many US dollars do I get for one euro?"),
        ("How do I convert Celsius to Fahrenheit?", "How do I convert Fahrenheit to Celsius?"),
    ],
)
def test_shared_words_trading_sides_of_a_preposition_is_a_miss(stored: str, asked: str) -> None:
    assert not same(stored, asked)


def test_one_word_moving_across_a_preposition_is_a_rephrasing() -> None:
    assert same("What is the tallest mountain in the world?", "Which mountain in the world is the tallest?")
    assert same("How many ounces in a pound?", "A pound is how many ounces?")  # no shared preposition


def test_compounds_are_whole_words_and_forms_need_a_known_suffix() -> None:
    assert not same("What is the check-in time at most hotels?", "What is the check-out time at most hotels?")
    assert not same("What is the capital of Australia?", "What is the capital of Austria?")
    assert not _related("austria", "australia") and not _related("check-in", "check-out")
    for a, b in [
        ("painted", "painter"),
        ("create", "creating"),
        ("differ", "difference"),
        ("paint", "paints"),
    ]:
        assert _related(a, b) and _related(b, a), (a, b)
    assert not _related("win", "wine")  # a stem of fewer than four letters is no stem


def test_words_that_name_things_are_content_words() -> None:
    assert not same("How do I make a GET request in Python?", "How do I make a POST request in Python?")
    assert not same("How do I print hello world in Go?", "How do I print hello world in Ruby?")


def test_the_judge_pairs_words_only_through_a_dominant_sense() -> None:
    judge = judge_in(Path(load_settings().build_cache_dir).expanduser())
    if judge is None:
        pytest.skip("WordNet is not in the build cache (scripts/setup.sh)")
    # minute and second share only their second and third senses ({moment, minute, second, instant})
    assert not judge.related("minutes", "seconds")
    assert not agree(terms("How many minutes are in a day?"), terms("How many seconds are in a day?"), judge)
    assert judge.related("largest", "biggest") and judge.related("wrote", "author")


@pytest.mark.parametrize(
    ("stored", "asked"),
    [
        ("How do I find rows where a column is null?", "How do I find rows where a column is not null?"),
        ("grep lines that match a pattern", "grep lines that don't match a pattern"),
        ("Can I eat bread with yeast?", "Can I bake bread without yeast?"),
        ("Why does my phone charge slowly?", "Why doesnt my phone charge?"),
    ],
)
def test_a_negation_added_is_a_miss(stored: str, asked: str) -> None:
    assert not same(stored, asked)


def test_the_same_negation_in_other_words_is_not() -> None:
    assert same("Why won't my laptop turn on?", "Why will my laptop not turn on?")
    assert same("What should I not eat when pregnant?", "Foods I shouldn't eat when pregnant?")


def test_words_trading_sides_of_a_second_preposition_are_a_miss() -> None:
    assert not same(
        "What time is it in Tokyo when it is noon in London?",
        "What time is it in London when it is noon in Tokyo?",
    )
    # A word added around the anchors is still a rephrasing.
    assert same("How many hours ahead is Tokyo of London?", "How many hours ahead is Tokyo of London now?")
