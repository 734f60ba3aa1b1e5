"""The answers kept for labels (gateway/accounts/quality/feedback.py): feedback, re-asks, one label per answer."""

from __future__ import annotations

import pytest

import router
from gateway.accounts.quality.feedback import FeedbackRequest, Outcomes, similarity
from gateway.errors import Conflict, InvalidRequest, NotFound
from tiers import Modality


def keys(text: str) -> router.QualityKeys:
    f = router.Features.estimate(
        text_chars=len(text),
        turns=1,
        max_tokens=16,
        modalities=frozenset({Modality.TEXT}),
        stream=False,
        text=text,
    )
    return router.quality_keys(f, None)


class Book:
    def __init__(self) -> None:
        self.now = 1000.0
        self.learned: list[tuple[str, str, bool]] = []
        self.outcomes = Outcomes(
            lambda t, tier, k, good: self.learned.append((t, tier, good)), clock=lambda: self.now
        )


def test_feedback_is_the_tenants_own_and_the_first_label_counts() -> None:
    book = Book()
    book.outcomes.answered("r1", "a", "edge", keys("What is the capital of Peru?"), None)
    with pytest.raises(NotFound):
        book.outcomes.feedback("b", FeedbackRequest(id="chatcmpl-r1", label="good"))
    with pytest.raises(NotFound):
        book.outcomes.feedback("a", FeedbackRequest(id="r1", label="good"))  # not an id the API gave
    with pytest.raises(InvalidRequest):
        book.outcomes.feedback("a", FeedbackRequest(id="chatcmpl-r1"))
    said = book.outcomes.feedback("a", FeedbackRequest(id="chatcmpl-r1", score=0.5))
    assert said["label"] == "good" and book.learned == [("a", "edge", True)]
    assert (
        book.outcomes.feedback("a", FeedbackRequest(id="chatcmpl-r1", label="thumbs_up"))["label"] == "good"
    )
    with pytest.raises(Conflict):
        book.outcomes.feedback("a", FeedbackRequest(id="chatcmpl-r1", score=0.2))
    assert book.learned == [("a", "edge", True)]  # learned once


def test_a_similar_turn_again_in_the_session_is_a_reask() -> None:
    book = Book()
    book.outcomes.answered("r1", "a", "edge", keys("How many legs does a spider have?"), "s")
    book.now += 30
    book.outcomes.answered(
        "r2", "a", "edge", keys("Write a haiku about autumn leaves"), "s"
    )  # another question
    book.now += 30
    book.outcomes.answered("r3", "a", "edge", keys("write a haiku about autumn leaves, please"), "s")
    book.now += 200
    book.outcomes.answered(
        "r4", "a", "edge", keys("write a haiku about autumn leaves, please"), "s"
    )  # too late
    book.outcomes.answered(
        "r5", "b", "edge", keys("write a haiku about autumn leaves, please"), "s"
    )  # another tenant
    assert book.learned == [("a", "edge", False)]
    assert book.outcomes.report("a") == [
        {"tenant": "a", "tier": "edge", "source": "re-ask", "good": False, "labels": 1}
    ]
    alias = "resp_0123"
    book.outcomes.alias(alias, "r2")
    with pytest.raises(Conflict):  # r2 was re-asked: labelled bad already
        book.outcomes.feedback("a", FeedbackRequest(id=alias, label="good"))


def test_similarity_reads_the_words() -> None:
    same = similarity(keys("How many legs does a spider have?"), keys("how many legs does a spider have"))
    other = similarity(keys("How many legs does a spider have?"), keys("Translate this contract into French"))
    assert same == pytest.approx(1.0) and other < 0.2


def test_a_shadow_compares_structured_short_and_prose_answers_each_their_way() -> None:
    from gateway.accounts.quality.shadow import agree

    assert agree('{"a": 1, "b": [2]}', '{"b": [2], "a": 1}', True, 0.6)
    assert not agree('{"a": 1}', '{"a": 2}', True, 0.6) and not agree("{", "{}", True, 0.6)
    assert agree("Paris.", "paris", False, 0.6) and not agree("Paris", "Lyon", False, 0.6)
    prose = "The river rises in the northern hills and flows south through three valleys to the sea"
    assert agree(prose, prose.replace("three", "several"), False, 0.6)
    assert not agree(
        prose, "Bake the bread at two hundred degrees for forty minutes until golden brown", False, 0.6
    )


def test_a_shadow_reads_prose_by_the_embedding_model_when_there_is_one() -> None:
    import asyncio

    from gateway.accounts.quality.shadow import agree, embedding_similarity

    class Embedder:
        available, max_tokens = True, 256

        async def loaded(self) -> None:
            return None

        def tokenize(self, texts: list[str]) -> list[list[int]]:
            return [[len(t)] for t in texts]

        async def embed(self, rows: list[list[int]]) -> list[list[float]]:
            return [[1.0, 0.0], [0.6, 0.8]]

    similar = asyncio.run(embedding_similarity(Embedder())("one long answer", "another long answer"))
    assert similar == pytest.approx(0.6)
    prose = "The river rises in the northern hills and flows south through three valleys to the sea"
    assert not agree(
        prose, prose, False, 0.7, similarity=similar
    )  # the model's cosine decides, not the words
    assert agree(prose, "Bake the bread at two hundred degrees for forty minutes today", False, 0.5, similar)
