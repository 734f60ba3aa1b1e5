"""The judge of a swapped word: whether two words WordNet says are relatives may stand for each other.

The near-miss guard (guard.py) rejects a candidate where a content word of one turn was replaced by
another word of the other ("capital of France" / "capital of Germany").  That also rejects the
paraphrases that swap a word for a synonym ("biggest" / "largest", "wrote" / "author").  The judge
lets such a pair through when WordNet 3.0 relates the two words in one of these ways:

  lemma      one lemma after WordNet's morphology (its exception lists and detachment rules:
             biggest -> big, wrote -> write, children -> child)
  synonym    a synset holds both (big / large): the first sense of one of them, among the first
             ``SENSES`` senses of the other (minute and second share only a later sense of
             each, {moment, minute, second, instant}: not synonyms)
  derived    a derivational link (WordNet's "+" pointer) from a sense of one, among its first
             ``SENSES``, to a synset that holds the other (write -> writer, of {writer, author})

and never when WordNet marks them antonyms ("!" pointers: big / small).  No other pointer is
followed: co-hyponyms (France / Germany, Python / JavaScript, boiling / freezing) share only a
hypernym, and a shared hypernym is exactly a near miss.  Only frequent senses count because the rare
ones join words a reader would not swap (WordNet's sense 10 of "key" and of "value" are not what a
question means); the index lists senses most frequent first (from the SemCor counts).

Answers are memoised per pair of words (``CACHE_PAIRS`` of them), so a hot stored turn costs a
dictionary look-up; a new pair costs a few binary searches of the mapped index and synset reads.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path

from gateway.pipeline.answers.semantic.wordnet import FOLDER, Synset, WordNet

log = logging.getLogger(__name__)
Lemmas = frozenset[tuple[str, str]]
SENSES = 3  # the senses of a word that count: its most frequent ones
CACHE_PAIRS = 16384  # the pairs judged whose answers are kept (an entry is two short strings and a bool)


class Judge:
    def __init__(self, wordnet: WordNet, senses: int = SENSES) -> None:
        self.wordnet = wordnet
        self._senses = senses
        self.related = functools.lru_cache(maxsize=CACHE_PAIRS)(self._related)

    def _related(self, a: str, b: str) -> bool:
        """Whether ``b`` may stand for ``a`` (both lower-case words as the turn has them)."""
        if a == b:
            return True
        lemmas_a, lemmas_b = self.wordnet.lemmas(a), self.wordnet.lemmas(b)
        if not lemmas_a or not lemmas_b:
            return False  # a word WordNet does not know (a name, a product): only itself
        words_b = {lemma for _, lemma in lemmas_b}
        if any(lemma in words_b for _, lemma in lemmas_a):
            return True
        if self._antonyms(lemmas_a, words_b) or self._antonyms(lemmas_b, {w for _, w in lemmas_a}):
            return False
        return self._close(lemmas_a, lemmas_b) or self._close(lemmas_b, lemmas_a)

    def _offsets(self, pos: str, lemma: str) -> tuple[int, ...]:
        return self.wordnet.senses(pos, lemma)[: self._senses]

    def _frequent(self, pos: str, lemma: str) -> list[Synset]:
        return [self.wordnet.synset(pos, o) for o in self._offsets(pos, lemma)]

    def _close(self, lemmas_a: Lemmas, lemmas_b: Lemmas) -> bool:
        """A frequent sense of ``a`` shares a synset with a frequent sense of ``b``, or is derivationally
        linked to a synset holding ``b``."""
        frequent_b = {(pos, o) for pos, lemma in lemmas_b for o in self._offsets(pos, lemma)}
        first_b = {(pos, o) for pos, lemma in lemmas_b for o in self._offsets(pos, lemma)[:1]}
        words_b = {lemma for _, lemma in lemmas_b}
        for pos, lemma in lemmas_a:
            for rank, offset in enumerate(self._offsets(pos, lemma)):
                if (pos, offset) in (frequent_b if rank == 0 else first_b):
                    return True
                synset = self.wordnet.synset(pos, offset)
                number = synset.words.index(lemma) + 1 if lemma in synset.words else -1
                derived = (p for p in synset.pointers if p.symbol == "+" and p.source == number)
                if any(words_b & set(self.wordnet.synset(p.pos, p.offset).words) for p in derived):
                    return True
        return False

    def _antonyms(self, lemmas: Lemmas, others: frozenset[str] | set[str]) -> bool:
        for pos, lemma in lemmas:
            for synset in self._frequent(pos, lemma):
                for p in synset.pointers:
                    if p.symbol == "!" and others & set(self.wordnet.synset(p.pos, p.offset).words):
                        return True
        return False


_lock = threading.Lock()
_judges: dict[Path, Judge | None] = {}


def judge_in(build_cache_dir: str | Path) -> Judge | None:
    """The judge over ``<build_cache_dir>/models/wordnet-3.0``, opened once per process (None, and one log
    line, when the files are not there: the guard then rejects every swapped word as before)."""
    folder = Path(build_cache_dir).expanduser() / FOLDER
    with _lock:
        if folder not in _judges:
            _judges[folder] = _opened(folder)
        return _judges[folder]


def _opened(folder: Path) -> Judge | None:
    try:
        wordnet = WordNet.open(folder)
    except (OSError, ValueError) as exc:
        log.warning("semantic cache: WordNet in %s is unreadable (%s); synonym swaps miss", folder, exc)
        return None
    if wordnet is None:
        log.warning(
            "semantic cache: no WordNet in %s (scripts/setup.sh takes it into the build cache); "
            "the near-miss guard rejects every swapped word, synonyms too",
            folder,
        )
        return None
    log.info("semantic cache: the near-miss guard judges swapped words with WordNet in %s", folder)
    return Judge(wordnet)
