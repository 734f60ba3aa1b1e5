"""The near-miss guard: two turns that embed close may still ask different things.

all-MiniLM-L6-v2 puts "What is the capital of France?" and "... of Germany?" at cosine 0.9, as close
as most paraphrases, so a threshold alone cannot keep false hits near zero.  A candidate must also
pass cheap checks, each one a reason a reader can see:

  numbers     the same numbers in the same order ("15 times 12" is not "15 times 13", "2 to the
              power of 8" is not "8 to the power of 2"); "one" to "twelve" count as numbers
  quotes      the same quoted strings (translate "hello", the meaning of "ephemeral")
  particles   no particle replaced by another: "zoom in" / "zoom out", "turn off" / "turn on",
              "round up" / "round down", "left join" / "right join", "with milk" / "without milk"
  words       no content word replaced by another: one turn may add or drop words ("in the world",
              "what is the command to"), but a word that only the stored turn has and a word that
              only the new one has (France / Germany, boiling / freezing, key / value) is a different
              question
  negation    as many negations ("not", "no", "never", "don't") on either side: "is null" / "is not
              null", "files that match" / "files that don't match"
  order       the content words both turns have, in the same order ("miles in a kilometer" /
              "kilometers in a mile", "a list to a set" / "a set to a list")

Content words are lower-cased, their plural "s" dropped, and common function and phrasing words
("what", "how", "explain", "way") ignored.  Two words are one word when they are equal (a hyphenated
compound is one word: check-in is not check-out) or the shorter one plus a known suffix spells the
longer one (paint / painter, differ / difference).  A replaced word is forgiven when the judge
(judge.py, over WordNet) pairs it with a relative on the other side: the same lemma (biggest / big),
a synonym (biggest / largest) or a derivation (wrote / author); never an antonym or a co-hyponym.
Without WordNet (no setup) every replaced word rejects, synonyms too.  docs/cache.md has the rates.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.pipeline.answers.semantic.judge import Judge

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*|\b[IVX]{2,}\b")
_QUOTED = re.compile(r"\"([^\"]+)\"|“([^”]+)”|'([^']{2,})'(?!\w)")
_WORD = re.compile(r"[a-z0-9][a-z0-9+#'-]*")
# Function and phrasing words: asking "how do I" or "what is the command to" changes no answer.
_IGNORED_WORDS = """
    a an the is are was were be been am do does did done how what what's whats which who whom whose
    why when where can could should would will shall may might must i i'm me my mine you your we our us
    it its it's of to for by from about as and or but than that this these
    those there their they them some any much many give tell please way ways best good
    explain define describe name suggest recommend command formula step steps kind type
    mean meaning called call use using used exactly actually really also just so if then
    like want need know let hi hello hey thanks thank have has more
    usually typically generally often during main mostly mainly
"""
# Particles and prepositions whose swap flips the question; adding or dropping one does not.
_PARTICLE_WORDS = """
    in into on onto at out off up down over under above below before after left right inside outside
    forward backward back front top bottom with without
"""
# Negations: one turn saying one more of them asks the opposite ("is null" / "is not null").
_NEGATION_WORDS = """
    not no never none nothing nobody neither nor cannot without
    dont doesnt didnt cant wont isnt arent wasnt werent shouldnt couldnt wouldnt havent hasnt
"""
NEGATIONS = frozenset(_NEGATION_WORDS.split())
_SPELLED_WORDS = "one two three four five six seven eight nine ten eleven twelve"
# Prepositions that tie the words on either side to a role: "miles in a kilometer", "a list to a set".
_ANCHOR_WORDS = "to into from than versus vs in of for per at on with by"
ANCHORS = frozenset(_ANCHOR_WORDS.split())
_NUMBER_WORDS = _SPELLED_WORDS.split()
IGNORED = frozenset(_IGNORED_WORDS.split())
PARTICLES = frozenset(_PARTICLE_WORDS.split())
_SPELLED = {word: str(n) for n, word in enumerate(_NUMBER_WORDS, start=1)}
# What may follow a word to spell another form of it (paint / painter, differ / difference).
_SUFFIX_WORDS = "e y s es ed d ing er ers r ion ions ment ments ence ance al ly ity ness ation ations"
_SUFFIXES = frozenset(["", *_SUFFIX_WORDS.split()])
_STEM = 4  # the least stem two forms of one word share


@dataclass(frozen=True, slots=True)
class Terms:
    """What of a turn must agree with a candidate's: its numbers, quoted strings, particles and content
    words."""

    numbers: tuple[str, ...]  # in the order the turn says them
    quoted: frozenset[str]
    particles: tuple[str, ...]  # sorted: compared as a multiset
    negations: int  # how many negations it says ("not", "never", "don't", ...)
    words: tuple[str, ...]
    forms: tuple[str, ...]  # each of ``words`` as the turn spells it (lower-cased), for the judge
    # Where each anchor word ("to", "in", "of", ...) stands, every time it does: how many of ``words``
    # come before it.
    anchors: tuple[tuple[str, int], ...]


def _plain(word: str) -> str:
    word = word.removesuffix("'s").strip("'")
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def terms(text: str) -> Terms:
    quoted = frozenset(next(g for g in m.groups() if g).lower() for m in _QUOTED.finditer(text))
    numbers = (_SPELLED.get(m.group(0).lower(), m.group(0)) for m in _numbers(text))
    lowered = _WORD.findall(text.lower())
    particles = tuple(sorted(w for w in lowered if w in PARTICLES))
    negated = [w in NEGATIONS or w.endswith("n't") for w in lowered]
    forms: list[str] = []
    anchors: list[tuple[str, int]] = []
    for w, negation in zip(lowered, negated, strict=True):
        if w in ANCHORS:
            anchors.append((w, len(forms)))
        if negation or w in IGNORED or w in PARTICLES or w in _SPELLED or w.isdigit():
            continue
        forms.append(w.removesuffix("'s").strip("'"))
    words = tuple(map(_plain, forms))
    return Terms(tuple(numbers), quoted, particles, sum(negated), words, tuple(forms), tuple(anchors))


_SPELLED_NUMBER = re.compile(r"\b(?:" + "|".join(_NUMBER_WORDS) + r")\b", re.IGNORECASE)


def _numbers(text: str) -> list[re.Match[str]]:
    """Digits, Roman numerals and "one" to "twelve", in the order the text says them."""
    found = [*_NUMBER.finditer(text), *_SPELLED_NUMBER.finditer(text)]
    return sorted(found, key=lambda m: m.start())


def agree(stored: Terms, asked: Terms, judge: Judge | None = None) -> bool:
    """Whether ``asked`` may get the answer of ``stored`` as far as the guard sees."""
    if stored.numbers != asked.numbers or stored.quoted != asked.quoted:
        return False
    if stored.negations != asked.negations:
        return False  # one asks the opposite of the other
    stored_particles, asked_particles = Counter(stored.particles), Counter(asked.particles)
    if stored_particles - asked_particles and asked_particles - stored_particles:
        return False  # a particle replaced by another
    only_stored = _unmatched(stored.words, asked.words)
    only_asked = _unmatched(asked.words, stored.words)
    if only_stored and only_asked and judge is not None:
        stored_forms = [stored.forms[i] for i in only_stored]
        asked_forms = [asked.forms[i] for i in only_asked]
        only_stored = [i for i in only_stored if not _paired(judge, stored.forms[i], asked_forms)]
        only_asked = [i for i in only_asked if not _paired(judge, asked.forms[i], stored_forms)]
    if only_stored and only_asked:
        return False  # a word replaced by another
    return not _crossed(stored, asked, judge)


def _paired(judge: Judge, word: str, others: list[str]) -> bool:
    return any(judge.related(word, other) for other in others)


def _related(a: str, b: str) -> bool:
    """One word, or two forms of it: a stem of at least four letters that each is, plus a known
    suffix or nothing (painted / painter, bake / baking, differ / difference; never Austria /
    Australia, check-in / check-out)."""
    if a == b:
        return True
    common = next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    return any(a[k:] in _SUFFIXES and b[k:] in _SUFFIXES for k in range(common, _STEM - 1, -1))


def _unmatched(words: tuple[str, ...], others: tuple[str, ...]) -> list[int]:
    """The places of the words that no word of ``others`` matches."""
    return [i for i, w in enumerate(words) if not any(_related(w, o) for o in others)]


def _crossed(stored: Terms, asked: Terms, judge: Judge | None) -> bool:
    """Whether two shared words trade sides of an anchor both turns have: "miles in a kilometer" /
    "kilometers in a mile", "a list to a set" / "a set to a list".  One word moving across is a
    rephrasing ("the largest planet in the solar system" / "which planet in it is the biggest")."""
    # The n-th "in" of one turn stands for the n-th "in" of the other: "the time in Tokyo when it is
    # noon in London" / "... in London when it is noon in Tokyo" trade sides of the second one.
    anchors = _paired_anchors(stored.anchors, asked.anchors)
    if not anchors:
        return False
    places = [_place(word, form, asked, judge) for word, form in zip(stored.words, stored.forms, strict=True)]
    for at, asked_at in anchors:
        moved: set[bool] = set()
        for i, place in enumerate(places):
            before = i < at
            if place is not None and before != (place < asked_at):
                moved.add(before)
        if len(moved) == 2:
            return True
    return False


def _paired_anchors(
    stored: tuple[tuple[str, int], ...], asked: tuple[tuple[str, int], ...]
) -> list[tuple[int, int]]:
    """Each anchor word's occurrences in both turns, paired in order: (place in stored, in asked)."""
    asked_by_word: dict[str, list[int]] = {}
    for word, at in asked:
        asked_by_word.setdefault(word, []).append(at)
    seen: dict[str, int] = {}
    paired = []
    for word, at in stored:
        n = seen[word] = seen.get(word, -1) + 1
        others = asked_by_word.get(word, [])
        if n < len(others):
            paired.append((at, others[n]))
    return paired


def _place(word: str, form: str, other: Terms, judge: Judge | None) -> int | None:
    """Where ``other`` has ``word`` (a form of it, or with the judge a relative), if it does; the
    judge is asked only when no form matches (it costs look-ups the first time)."""
    found = next((i for i, o in enumerate(other.words) if _related(word, o)), None)
    if found is None and judge is not None:
        found = next((i for i, o in enumerate(other.forms) if judge.related(form, o)), None)
    return found
