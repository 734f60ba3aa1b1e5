"""The semantic cache's index: unit vectors of stored requests' last user turns, nearest first.

Vectors live in usearch (HNSW; a maintained single-file library with manylinux wheels), one index per
tenant.  One index per tenant rather than one for all: a search reads the ``candidates`` nearest
entries and keeps those of the asked context, so in a shared index a busy tenant's entries could push
another tenant's out of those candidates; per tenant, only the tenant's own contexts compete (a miss
when more than ``candidates`` nearer entries of other contexts exist, never a wrong answer), and a
tenant can never be handed another's entry, whatever a search returns.

The index knows no policy: what an entry's context is, and which candidate may answer, is the
gateway's business (gateway/pipeline/semantic/).  Entries carry the key of their answer in the result
store; the answer itself stays there.  Bounded: ``max_entries`` in all and ``max_per_tenant`` for one
tenant, the oldest going first; an expired entry is never returned and is dropped when met.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable

import msgspec
import numpy as np
import numpy.typing as npt
from usearch.compiled import ScalarKind
from usearch.index import Index

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


class _Tenant:
    """One tenant's usearch index and its entries by integer key, oldest first."""

    def __init__(self, dimensions: int) -> None:
        # f16: half the memory of f32; cosine is off by ~1e-3 at most, far below any useful threshold step.
        self.index = Index(ndim=dimensions, metric="cos", dtype=ScalarKind.F16)
        self.entries: OrderedDict[int, Entry] = OrderedDict()


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
        tenant.index.add(key, np.asarray(vector, dtype=np.float32).reshape(-1))
        tenant.entries[key] = msgspec.structs.replace(entry, vector=b"")
        self._where[entry.answer_key] = (entry.tenant, key)

    def remove(self, answer_key: str) -> None:
        where = self._where.pop(answer_key, None)
        if where is None:
            return
        name, key = where
        tenant = self._tenants[name]
        tenant.entries.pop(key, None)
        tenant.index.remove(key)
        if not tenant.entries:
            del self._tenants[name]

    def search(self, tenant: str, context: str, vector: Vectors) -> list[tuple[Entry, float]]:
        """The tenant's live entries of ``context`` among its nearest ``candidates``, with their cosine
        similarity, most similar first."""
        found = self._tenants.get(tenant)
        if found is None:
            return []
        count = min(self._candidates, len(found.entries))
        matches = found.index.search(np.asarray(vector, dtype=np.float32).reshape(-1), count)
        now = time.time()
        out: list[tuple[Entry, float]] = []
        expired: list[str] = []
        for key, distance in zip(matches.keys.tolist(), matches.distances.tolist(), strict=True):
            entry = found.entries.get(int(key))
            if entry is None:
                continue
            if entry.expires <= now:
                expired.append(entry.answer_key)
            elif entry.context == context:
                out.append((entry, 1.0 - float(distance)))
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
                vector = np.asarray(tenant.index.get(key), dtype=np.float32).tobytes()
                yield msgspec.structs.replace(entry, vector=vector)

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
