"""The semantic index (faiss): nearest first, only the asked tenant and context, bounded, expired
entries never returned, and a dump that loads back."""

from __future__ import annotations

import time

import numpy as np
import pytest

import cache

DIMS = 8


def unit(*values: float) -> np.ndarray:
    v = np.zeros(DIMS, dtype=np.float32)
    v[: len(values)] = values
    return v / np.linalg.norm(v)


def entry(key: str, tenant: str = "a", context: str = "c", ttl_s: float = 60.0) -> cache.Entry:
    return cache.Entry(key, tenant, context, f"text of {key}", time.time() + ttl_s)


def index(**kw: int) -> cache.SemanticIndex:
    bounds = {"max_entries": 100, "max_per_tenant": 50, "candidates": 8} | kw
    return cache.SemanticIndex(DIMS, **bounds)


def test_the_nearest_of_the_tenant_and_context_come_first_with_their_similarity() -> None:
    idx = index()
    idx.add(entry("near"), unit(1, 0.1))
    idx.add(entry("far"), unit(0.2, 1))
    idx.add(entry("other-context", context="d"), unit(1, 0))
    idx.add(entry("other-tenant", tenant="b"), unit(1, 0))
    found = idx.search("a", "c", unit(1, 0))
    assert [e.answer_key for e, _ in found] == ["near", "far"]
    assert found[0][1] == pytest.approx(float(unit(1, 0.1) @ unit(1, 0)), abs=2e-3)
    assert found[0][1] > found[1][1]
    assert idx.search("b", "c", unit(1, 0))[0][0].answer_key == "other-tenant"
    assert idx.search("nobody", "c", unit(1, 0)) == []


def test_expired_entries_are_never_returned_and_are_dropped() -> None:
    idx = index()
    idx.add(entry("old", ttl_s=-1), unit(1))
    idx.add(entry("live"), unit(1, 0.5))
    assert [e.answer_key for e, _ in idx.search("a", "c", unit(1))] == ["live"]
    assert "old" not in idx and len(idx) == 1


def test_bounds_drop_the_oldest_per_tenant_and_in_all() -> None:
    idx = index(max_entries=5, max_per_tenant=3)
    for i in range(4):
        idx.add(entry(f"a{i}"), unit(1, i))
    assert "a0" not in idx and len(idx) == 3
    for i in range(3):
        idx.add(entry(f"b{i}", tenant="b"), unit(1, i))
    assert len(idx) == 5 and "a1" not in idx and "a2" in idx and "b2" in idx  # a1: the oldest of all


def test_adding_the_same_answer_key_replaces_it() -> None:
    idx = index()
    idx.add(entry("k"), unit(1))
    idx.add(entry("k", context="d"), unit(0, 1))
    assert len(idx) == 1 and idx.search("a", "c", unit(1)) == []
    assert idx.search("a", "d", unit(0, 1))[0][0].answer_key == "k"


def test_a_dump_loads_back_with_its_vectors_and_a_malformed_one_adds_nothing() -> None:
    idx = index()
    idx.add(entry("x"), unit(1, 2, 3))
    idx.add(entry("y", tenant="b"), unit(3, 2, 1))
    again = index()
    assert again.load(idx.dump()) == 2
    (found, similarity), *_ = again.search("a", "c", unit(1, 2, 3))
    assert found.answer_key == "x" and similarity == pytest.approx(1.0, abs=2e-3)
    assert index().load(b"\x00not msgpack") == 0
    short = cache.Entry("z", "a", "c", "t", time.time() + 60, np.zeros(3, dtype=np.float32).tobytes())
    assert not again.add_wire(short)  # a vector of the wrong size is refused
