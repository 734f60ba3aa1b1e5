"""Token choice and incremental detokenizing for engines that return raw logits (the ONNX tier)."""

from __future__ import annotations

import numpy as np

from tiers.edge._onnx import choose_providers
from tiers.edge._sampling import IncrementalDetokenizer, Sampler


def test_temperature_zero_is_greedy() -> None:
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    assert Sampler(0.0, 1.0, seed=None).pick(logits) == 1


def test_a_seed_repeats_and_a_tight_top_p_keeps_only_the_best() -> None:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=1000).astype(np.float32)
    a = [Sampler(1.0, 0.95, seed=7).pick(logits) for _ in range(5)]
    assert len(set(a)) == 1
    picks = {Sampler(1.0, 0.95, seed=s).pick(logits) for s in range(50)}
    assert len(picks) > 1
    assert {Sampler(1.0, 1e-6, seed=s).pick(logits) for s in range(20)} == {int(logits.argmax())}


def test_penalties_move_away_from_repeated_tokens() -> None:
    logits = np.array([5.0, 4.9, 0.0], dtype=np.float32)
    sampler = Sampler(0.0, 1.0, seed=None, presence_penalty=1.0)
    assert [sampler.pick(logits) for _ in range(2)] == [0, 1]


class ByteTokenizer:
    """Each id is one UTF-8 byte: the worst case for splitting characters."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def test_detokenizer_never_splits_a_character() -> None:
    text = "héllo 🎉 ok"
    detok = IncrementalDetokenizer(ByteTokenizer())
    pieces = [detok.feed(b) for b in text.encode()]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) + detok.flush() == text


def test_cuda_comes_first_when_onnxruntime_has_it() -> None:
    assert choose_providers(["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    both = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_providers(both) == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_any_int64_seed_is_taken_negative_included() -> None:
    logits = np.array([0.0, 1.0, 0.5], dtype=np.float32)
    for seed in (-1, -(2**63), 2**63 - 1):
        picks = [Sampler(1.0, 1.0, seed=seed).pick(logits) for _ in range(3)]
        assert len(set(picks)) == 1  # seeded: the same pick every time
