"""The semantic cache's index: unit vectors of stored requests' last user turns, nearest first.

Vectors live in faiss (``faiss-cpu``: manylinux wheels, no build step), one exact inner-product
index per tenant (the vectors are unit: inner product = cosine).  Exact, not HNSW: a tenant holds at
most ``max_per_tenant`` entries (10,000 × 384 floats are searched in about a millisecond), and an
exact index answers removals at once (HNSW graphs only mark them).  usearch was tried first: its
wheel's statically linked C++ runtime breaks llama.cpp's model loading in the same process
(``std::bad_cast`` reading the vocabulary), whichever is imported first.

One index per tenant rather than one for all: a search reads the ``candidates`` nearest entries and
keeps those of the asked context, so in a shared index a busy tenant's entries could push another
tenant's out of those candidates; per tenant, only the tenant's own contexts compete (a miss when more
than ``candidates`` nearer entries of other contexts exist, never a wrong answer), and a tenant can
never be handed another's entry, whatever a search returns.

The index knows no policy: what an entry's context is, and which candidate may answer, is the
gateway's business (gateway/pipeline/answers/semantic/).  Entries carry the key of their answer in the result
store; the answer itself stays there.  Bounded: ``max_entries`` in all and ``max_per_tenant`` for one
tenant, the oldest going first; an expired entry is never returned and is dropped when met.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable

import faiss
import msgspec
import numpy as np
import numpy.typing as npt

Vectors = npt.NDArray[np.float32]


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One stored request: ``answer_key`` names its answer in the result store (and the entry)."""

    answer_key: str
    tenant: str
    context: str  # a digest of everything but the last user turn (model route, params, earlier turns)
    text: str  # the last user turn, for the gateway's near-miss guard
    expires: float  # Unix time
    vector: bytes = b""  # float32 unit vector; kept only on the wire (in memory it is in the index)


_encode = msgspec.msgpack.Encoder().encode
_decode_entries = msgspec.msgpack.Decoder(list[Entry]).decode
_decode_entry = msgspec.msgpack.Decoder(Entry).decode


def encode_entry(entry: Entry) -> bytes:
    return _encode(entry)


def decode_entry(data: bytes) -> Entry | None:
    try:
        return _decode_entry(data)
    except msgspec.DecodeError:
        return None


# One lookup is one small search: faiss' OpenMP threads would cost more to wake than they save, and
# would take the cores the event loop and the models need.
faiss.omp_set_num_threads(1)


class _Tenant:
    """One tenant's faiss index and its entries by integer key, oldest first."""

    def __init__(self, dimensions: int) -> None:
        self.index = faiss.IndexIDMap2(faiss.IndexFlatIP(dimensions))
        self.entries: OrderedDict[int, Entry] = OrderedDict()

    def add(self, key: int, vector: Vectors) -> None:
        self.index.add_with_ids(vector.reshape(1, -1), np.array([key], dtype=np.int64))

    def remove(self, key: int) -> None:
        # faiss' Python wrapper takes an id array (its stubs name only the C++ IDSelector)
        self.index.remove_ids(np.array([key], dtype=np.int64))  # type: ignore[arg-type]

    def search(self, vector: Vectors, count: int) -> list[tuple[int, float]]:
        scores, keys = self.index.search(vector.reshape(1, -1), count)
        return [(int(k), float(s)) for k, s in zip(keys[0], scores[0], strict=True) if k >= 0]

    def vector(self, key: int) -> Vectors:
        return np.asarray(self.index.reconstruct(key), dtype=np.float32)


class SemanticIndex:
    def __init__(self, dimensions: int, *, max_entries: int, max_per_tenant: int, candidates: int) -> None:
        self.dimensions = dimensions
        self._max = max(1, max_entries)
        self._max_per_tenant = max(1, max_per_tenant)
        self._candidates = max(1, candidates)
        self._tenants: dict[str, _Tenant] = {}
        # answer key → (tenant, integer key), oldest first
        self._where: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._next = 0

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, answer_key: str) -> bool:
        return answer_key in self._where

    def add(self, entry: Entry, vector: Vectors) -> None:
        """Store ``entry`` (replacing one with its answer key), dropping the oldest beyond the bounds."""
        self.remove(entry.answer_key)
        tenant = self._tenants.get(entry.tenant)
        if tenant is None:
            tenant = self._tenants[entry.tenant] = _Tenant(self.dimensions)
        while len(tenant.entries) >= self._max_per_tenant:
            self.remove(next(iter(tenant.entries.values())).answer_key)
        while len(self._where) >= self._max:
            self.remove(next(iter(self._where)))
        tenant = self._tenants.setdefault(entry.tenant, tenant)  # removing may have dropped it
        key, self._next = self._next, self._next + 1
        tenant.add(key, np.ascontiguousarray(vector, dtype=np.float32))
        tenant.entries[key] = msgspec.structs.replace(entry, vector=b"")
        self._where[entry.answer_key] = (entry.tenant, key)

    def remove(self, answer_key: str) -> None:
        where = self._where.pop(answer_key, None)
        if where is None:
            return
        name, key = where
        tenant = self._tenants[name]
        tenant.entries.pop(key, None)
        tenant.remove(key)
        if not tenant.entries:
            del self._tenants[name]

    def search(self, tenant: str, context: str, vector: Vectors) -> list[tuple[Entry, float]]:
        """The tenant's live entries of ``context`` among its nearest ``candidates``, with their cosine
        similarity, most similar first."""
        found = self._tenants.get(tenant)
        if found is None:
            return []
        count = min(self._candidates, len(found.entries))
        matches = found.search(np.ascontiguousarray(vector, dtype=np.float32), count)
        now = time.time()
        out: list[tuple[Entry, float]] = []
        expired: list[str] = []
        for key, similarity in matches:
            entry = found.entries.get(key)
            if entry is None:
                continue
            if entry.expires <= now:
                expired.append(entry.answer_key)
            elif entry.context == context:
                out.append((entry, similarity))
        for answer_key in expired:
            self.remove(answer_key)
        return out

    def entries(self) -> Iterable[Entry]:
        """Every live entry with its vector, oldest first (what is saved)."""
        now = time.time()
        for name, key in list(self._where.values()):
            tenant = self._tenants[name]
            entry = tenant.entries[key]
            if entry.expires > now:
                yield msgspec.structs.replace(entry, vector=tenant.vector(key).tobytes())

    def dump(self) -> bytes:
        return _encode(list(self.entries()))

    def load(self, data: bytes) -> int:
        """Add the live entries of a :meth:`dump`; an unreadable one adds nothing. Returns how many."""
        try:
            entries = _decode_entries(data)
        except msgspec.DecodeError:
            return 0
        now = time.time()
        added = 0
        for entry in entries:
            if entry.expires > now and self.add_wire(entry):
                added += 1
        return added

    def add_wire(self, entry: Entry) -> bool:
        """Add an entry that carries its vector (from disk or another gateway); False if it is malformed."""
        vector = np.frombuffer(entry.vector, dtype=np.float32)
        if vector.shape != (self.dimensions,) or not np.isfinite(vector).all():
            return False
        self.add(entry, vector)
        return True
