"""The near-miss guard: two turns that embed close may still ask different things.

all-MiniLM-L6-v2 puts "What is the capital of France?" and "... of Germany?" at cosine 0.9, as close
as most paraphrases, so a threshold alone cannot keep false hits near zero.  A candidate must also
pass three cheap checks, each one a reason a reader can see:

  numbers     the same numbers ("15 times 12" is not "15 times 13")
  quotes      the same quoted strings (translate "hello", the meaning of "ephemeral")
  words       no content word replaced by another: one turn may add or drop words ("in the world",
              "what is the command to"), but a word that only the stored turn has and a word that
              only the new one has (France / Germany, boiling / freezing, key / value) is a different
              question; and the same words in another order ("Celsius to Fahrenheit" / "Fahrenheit
              to Celsius") too

Content words are lower-cased, their plural "s" dropped, and common function and phrasing words
("what", "how", "explain", "way") ignored.  A replaced word is forgiven when the judge (judge.py, over
WordNet) pairs it with a relative on the other side: the same lemma (biggest / big), a synonym
(biggest / largest) or a derivation (wrote / author); never an antonym or a co-hyponym.  Without
WordNet (no setup) every replaced word rejects, synonyms too.  docs/cache.md has the rates.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.pipeline.semantic.judge import Judge

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*|\b[IVX]{2,}\b")
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|'([^']{2,})'(?!\w)")
_WORD = re.compile(r"[a-z0-9][a-z0-9+#'-]*")
# Function and phrasing words: asking "how do I" or "what is the command to" changes no answer.
_IGNORED_WORDS = """
    a an the is are was were be been am do does did done how what what's whats which who whom whose
    why when where can could should would will shall may might must i i'm me my mine you your we our us
    it its it's of in on at to for with by from about as into onto and or but than that this these
    those there their they them some any much many get give tell please way ways best right good
    explain define describe name list suggest recommend command formula step steps number kind type
    mean meaning called call go use using used exactly actually really also just so if then one
    like want need know let hi hello hey thanks thank have has more up out
    usually typically generally often during main mostly mainly
"""
_DIRECTION_WORDS = "to into from than versus vs"
IGNORED = frozenset(_IGNORED_WORDS.split())
_DIRECTIONS = frozenset(_DIRECTION_WORDS.split())
_STEM = 4  # two words sharing their first four letters are taken for forms of one word


@dataclass(frozen=True, slots=True)
class Terms:
    """What of a turn must agree with a candidate's: its numbers, quoted strings and content words."""

    numbers: frozenset[str]
    quoted: frozenset[str]
    words: tuple[str, ...]
    forms: tuple[str, ...]  # each of ``words`` as the turn spells it (lower-cased), for the judge
    # The direction words it says ("to", "into", "from", ...): with the same ones, the order of its
    # words may carry the meaning.
    directed: frozenset[str]


def _plain(word: str) -> str:
    word = word.removesuffix("'s").strip("'")
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def terms(text: str) -> Terms:
    quoted = frozenset(next(g for g in m.groups() if g).lower() for m in _QUOTED.finditer(text))
    lowered = _WORD.findall(text.lower())
    forms = tuple(w.removesuffix("'s").strip("'") for w in lowered if w not in IGNORED and not w.isdigit())
    directed = frozenset(w for w in lowered if w in _DIRECTIONS)
    return Terms(frozenset(_NUMBER.findall(text)), quoted, tuple(map(_plain, forms)), forms, directed)


def agree(stored: Terms, asked: Terms, judge: Judge | None = None) -> bool:
    """Whether ``asked`` may get the answer of ``stored`` as far as the guard sees."""
    if stored.numbers != asked.numbers or stored.quoted != asked.quoted:
        return False
    only_stored = _unmatched(stored.words, asked.words)
    only_asked = _unmatched(asked.words, stored.words)
    swapped = bool(only_stored and only_asked)
    if swapped and judge is not None:
        stored_forms = [stored.forms[i] for i in only_stored]
        asked_forms = [asked.forms[i] for i in only_asked]
        only_stored = [i for i in only_stored if not _paired(judge, stored.forms[i], asked_forms)]
        only_asked = [i for i in only_asked if not _paired(judge, asked.forms[i], stored_forms)]
    if only_stored and only_asked:
        return False  # a word replaced by another
    if stored.directed and stored.directed == asked.directed and not only_stored and not only_asked:
        if swapped:  # synonyms stand in: the order of the words both turns have
            return _in_order(stored.words, asked.words) == _in_order(asked.words, stored.words)
        return _in_order(stored.words) == _in_order(asked.words)
    return True


def _paired(judge: Judge, word: str, others: list[str]) -> bool:
    return any(judge.related(word, other) for other in others)


def _related(a: str, b: str) -> bool:
    """One word, or two forms of it (paint / painter, differ / difference, colour / color)."""
    n = min(len(a), len(b), _STEM)
    return a == b or (n == _STEM and a[:n] == b[:n])


def _unmatched(words: tuple[str, ...], others: tuple[str, ...]) -> list[int]:
    """The places of the words that no word of ``others`` matches."""
    return [i for i, w in enumerate(words) if not any(_related(w, o) for o in others)]


def _in_order(words: tuple[str, ...], shared_with: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The words in the order of their first appearance (a repeat does not change the order); with
    ``shared_with``, only those it matches, each by its first four letters (what ``_related`` sees)."""
    if shared_with is None:
        return tuple(dict.fromkeys(words))
    kept = (w[:_STEM] for w in words if any(_related(w, o) for o in shared_with))
    return tuple(dict.fromkeys(kept))
