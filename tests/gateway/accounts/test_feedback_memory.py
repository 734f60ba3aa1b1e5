"""What an answer kept for its label costs, and the bounds of what feedback.py keeps (issue 43).

Each answer used to keep its quality features as tuples of Python numbers (~1,130 bytes measured in
a soak) in a map of 100,000 that no setting changed: ~115 MB.  Now a few hundred bytes, a setting.
"""

from __future__ import annotations

import os
import random
import tracemalloc

import pytest

import router
from gateway.accounts.quality.feedback import FeedbackRequest, Outcomes
from gateway.accounts.quality.packed import pack, unpack
from gateway.accounts.quality.settings import FeedbackSettings
from gateway.errors import NotFound
from gateway.settings import load_settings
from tiers import Modality

WORDS = [f"word{i}" for i in range(5000)]
PER_ANSWER_BYTES = 450  # the bound asserted: "a few hundred bytes" a request (~415 measured)


def keys(text: str, image: bool = False) -> router.QualityKeys:
    f = router.Features.estimate(
        text_chars=len(text),
        turns=1,
        max_tokens=16,
        modalities=frozenset({Modality.TEXT, Modality.IMAGE} if image else {Modality.TEXT}),
        stream=False,
        text=text,
    )
    return router.quality_keys(f, 0.37)


def prompt(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


@pytest.mark.parametrize("words", [0, 1, 8, 40, 300, 2000])
def test_packed_features_are_the_same_features_in_a_few_hundred_bytes(words: int) -> None:
    rng = random.Random(words)
    made = keys(prompt(rng, words), image=True)
    packed = pack(made)
    assert unpack(packed) == made  # lossless: the learner gets what it would have
    # The longest prompt the model reads (4,000 characters) is a bitmap of 4,096 buckets at most.
    assert len(packed) <= 700, len(packed)
    if words <= 40:
        assert len(packed) <= 200, len(packed)


def test_indices_past_uint16_and_unsorted_ones_pack_too() -> None:
    cases: list[router.QualityKeys] = [
        ((1, 70_000, 3), (0.5, 0.5, 1.0)),
        ((5, 2, 9), (1.0, 2.0, 3.0)),
        ((), ()),
    ]
    for made in cases:
        assert unpack(pack(made)) == made


def test_an_answer_kept_for_its_label_costs_a_few_hundred_bytes() -> None:
    """Measured with tracemalloc over 5,000 answers to 8-40 word prompts: what stays allocated after
    each request, its features made in the measured span (as a request makes them, to be freed unless
    kept) and its id too (32 hex digits, as the gateway makes them): the map's entry, the id, the
    packed features.  The same measure gave 1,840 bytes before the features were packed."""
    rng = random.Random(43)
    texts = [prompt(rng, rng.randint(8, 40)) for _ in range(5000)]
    outcomes = Outcomes(lambda *_: None, settings=FeedbackSettings(answers_held=10_000))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for text in texts:
            outcomes.answered(os.urandom(16).hex(), "tenant", "edge", keys(text), None)
        per_answer = (tracemalloc.get_traced_memory()[0] - before) / len(texts)
    finally:
        tracemalloc.stop()
    assert per_answer <= PER_ANSWER_BYTES, per_answer


def test_answers_held_keeps_at_most_that_many_and_forgets_the_oldest() -> None:
    learned: list[bool] = []
    outcomes = Outcomes(
        lambda _t, _tier, _k, good: learned.append(good), settings=FeedbackSettings(answers_held=100)
    )
    k = keys("What is the capital of Peru?")
    for i in range(1000):
        outcomes.answered(f"r{i}", "a", "edge", k, None)
        outcomes.alias(f"resp_{i}", f"r{i}")
    assert len(outcomes._answers) == 100 and len(outcomes._aliases) == 100
    with pytest.raises(NotFound):
        outcomes.feedback("a", FeedbackRequest(id="chatcmpl-r899", label="good"))
    with pytest.raises(NotFound):
        outcomes.feedback("a", FeedbackRequest(id="resp_899", label="good"))
    assert outcomes.feedback("a", FeedbackRequest(id="resp_900", label="bad"))["label"] == "bad"
    assert outcomes.feedback("a", FeedbackRequest(id="chatcmpl-r999", label="good"))["label"] == "good"
    assert learned == [False, True]


def test_sessions_are_kept_for_the_reask_window_and_up_to_sessions_held() -> None:
    now = [0.0]
    outcomes = Outcomes(lambda *_: None, settings=FeedbackSettings(sessions_held=50), clock=lambda: now[0])
    k = keys("How many legs does a spider have?")
    for i in range(200):
        outcomes.answered(f"r{i}", "a", "edge", k, f"s{i}")
    assert len(outcomes._sessions) == 50  # a burst of new sessions: the bound
    now[0] += 121  # past the re-ask window: none could be re-asked, so none is kept
    outcomes.answered("late", "a", "edge", k, "another")
    assert list(outcomes._sessions) == [("a", "another")]


def test_feedback_settings_are_read_from_the_environment() -> None:
    settings = load_settings(
        environ={"TIERGATE_FEEDBACK__ANSWERS_HELD": "1234", "TIERGATE_FEEDBACK__SESSIONS_HELD": "56"}
    )
    assert settings.feedback == FeedbackSettings(answers_held=1234, sessions_held=56)
