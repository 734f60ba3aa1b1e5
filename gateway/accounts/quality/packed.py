"""A request's quality features packed into one ``bytes``, the way an answer waits for its label.

An answer is kept for a later label (feedback.py) with the quality features the learner will need
(router/_learning/quality.py ``quality_keys``: the prompt's word buckets, all of one weight, then six
numbers, the media and tool flags, the difficulty and the bias).  As a tuple of Python ints and
floats that is ~32 bytes an index and ~32 a value: ~2.6 KB for a 40-word prompt, 1.1 KB measured for
a typical one (issue 43).  Packed, the same features are ~150 bytes (2 an index, 10 a run of equal
values) and at most ~700 for the longest prompt the model reads (4,000 characters): the indices are
a bitmap when that is smaller.  Lossless: ``unpack(pack(keys)) == keys``.

Layout: a 5-byte header (how the indices are stored; how many indices; how many runs), the indices
(``H``: uint16 each; ``B``: a bitmap of bits 0..last), then the runs' lengths (uint16 each) and the
runs' values (float64 each).
"""

from __future__ import annotations

import struct
from array import array
from itertools import groupby, pairwise, repeat

import router

_HEADER = struct.Struct("<cHH")
_WIDE = b"I"  # uint32 indices, for a model with more buckets than uint16 holds
_SHORT = b"H"
_BITMAP = b"B"


def pack(keys: router.QualityKeys) -> bytes:
    """The features in one ``bytes`` (see the module's docstring)."""
    indices, values = keys
    runs = [(len(list(group)), value) for value, group in groupby(values)]
    last = max(indices, default=0)
    increasing = all(a < b for a, b in pairwise(indices))
    if increasing and indices and (last + 8) // 8 < 2 * len(indices):
        kind, body = _BITMAP, _bitmap(indices, last)
    elif last < 1 << 16:
        kind, body = _SHORT, array("H", indices).tobytes()
    else:
        kind, body = _WIDE, array("I", indices).tobytes()
    return b"".join(
        (
            _HEADER.pack(kind, len(indices), len(runs)),
            body,
            array("H", [n for n, _ in runs]).tobytes(),
            array("d", [v for _, v in runs]).tobytes(),
        )
    )


def unpack(packed: bytes) -> router.QualityKeys:
    """The features :func:`pack` packed."""
    kind, count, nruns = _HEADER.unpack_from(packed)
    at = _HEADER.size
    if kind == _BITMAP:
        bits = packed[at:]
        indices: list[int] = []
        for byte_at, byte in enumerate(bits):
            if len(indices) == count:
                break
            indices.extend(byte_at * 8 + bit for bit in range(8) if byte >> bit & 1)
        indices = indices[:count]
        at += (indices[-1] + 8) // 8 if indices else 0
    else:
        wide = array(kind.decode())
        wide.frombytes(packed[at : at + count * wide.itemsize])
        indices = wide.tolist()
        at += count * wide.itemsize
    lengths, values = array("H"), array("d")
    lengths.frombytes(packed[at : at + 2 * nruns])
    values.frombytes(packed[at + 2 * nruns : at + 10 * nruns])
    out = [x for n, value in zip(lengths, values, strict=True) for x in repeat(value, n)]
    return tuple(indices), tuple(out)


def _bitmap(indices: tuple[int, ...], last: int) -> bytes:
    bits = bytearray((last + 8) // 8)
    for i in indices:
        bits[i >> 3] |= 1 << (i & 7)
    return bytes(bits)
