"""The residency detectors on a labelled corpus (tests/residency/corpus.py: sensitive values and
look-alikes, each in several sentences): precision and recall per detector, printed, and held to a
floor; a redacted text keeps no detected value and comes back whole."""

from __future__ import annotations

import pytest

from gateway.residency import Redaction, compiled
from gateway.residency.detect import DETECTORS, Text
from router import ResidencyRule
from tests.residency.corpus import CORPUS, LOOK_ALIKES, SENSITIVE


def fired(text: str) -> frozenset[str]:
    scanned = Text(text)
    return frozenset(name for name, detect in DETECTORS.items() if next(detect(scanned), None) is not None)


def test_the_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 200
    assert sum(1 for _, labels in CORPUS if not labels) >= 100  # look-alikes


def test_precision_and_recall_per_detector() -> None:
    rows = []
    for name in DETECTORS:
        tp = fp = fn = 0
        for text, labels in CORPUS:
            hit = name in fired(text)
            tp += hit and name in labels
            fp += hit and name not in labels
            fn += not hit and name in labels
        precision = tp / (tp + fp) if tp + fp else 1.0
        recall = tp / (tp + fn) if tp + fn else 1.0
        rows.append((name, tp, fp, fn, precision, recall))
    print(f"\n{'detector':<12} {'tp':>4} {'fp':>4} {'fn':>4} {'precision':>9} {'recall':>7}")
    for name, tp, fp, fn, precision, recall in rows:
        print(f"{name:<12} {tp:>4} {fp:>4} {fn:>4} {precision:>9.3f} {recall:>7.3f}")
    for name, _, _, _, precision, recall in rows:
        assert precision >= 0.95, (name, precision)
        assert recall >= 0.95, (name, recall)


@pytest.mark.parametrize("value", LOOK_ALIKES)
def test_look_alikes_set_off_nothing(value: str) -> None:
    assert fired(value) == frozenset(), value


def test_redaction_hides_every_value_and_restores_it() -> None:
    rules = compiled([ResidencyRule(detector=d, action="redact") for d in DETECTORS])  # type: ignore[arg-type]
    for detector, values in SENSITIVE.items():
        for value in values:
            text = f"Send it to {value} today."
            redaction = Redaction()
            hidden = redaction.text(text, rules)
            assert value not in hidden, (detector, hidden)
            assert redaction.restore(hidden) == text


def test_a_tenant_pattern_runs_on_re2() -> None:
    (rule,) = compiled(
        [ResidencyRule(detector="pattern", action="redact", pattern=r"PRJ-\d{4}", name="project")]
    )
    redaction = Redaction()
    assert redaction.text("see PRJ-1234 and PRJ-1234", (rule,)) == "see [PROJECT_1] and [PROJECT_1]"
