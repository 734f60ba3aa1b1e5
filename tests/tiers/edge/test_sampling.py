"""Token choice and incremental detokenizing for engines that return raw logits (the ONNX tier)."""

from __future__ import annotations

import numpy as np

from tiers.edge._onnx import choose_providers
from tiers.edge._sampling import Sampler, TokenText, allowed_tokens, logprobs_of


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


def test_text_never_splits_a_character() -> None:
    text = "héllo 🎉 ok"
    pieces = [bytes([b]) for b in range(256)]  # each id one UTF-8 byte: the worst case
    detok = TokenText(pieces)
    out = [detok.feed(b) for b in text.encode()]
    assert all("\ufffd" not in p for p in out)
    assert "".join(out) + detok.flush() == text


def test_bias_masks_and_bans_shape_the_row_in_order() -> None:
    logits = np.array([5.0, 4.0, 3.0, 2.0], dtype=np.float32)
    assert Sampler(0.0, 1.0, seed=None, logit_bias={0: -100.0}).pick(logits) == 1
    assert Sampler(0.0, 1.0, seed=None).pick(logits, banned={0, 1}) == 2
    allowed = np.array([False, True, False, True])
    assert Sampler(0.0, 1.0, seed=None).pick(logits, banned={1}, allowed=allowed) == 3
    only_end = np.array([True, False, False, False])  # the grammar allows only the banned end token
    assert Sampler(0.0, 1.0, seed=None).pick(logits, banned={0}, allowed=only_end) == 0
    rep = Sampler(0.0, 1.0, seed=None, repetition_penalty=2.0, prompt=[0])
    assert rep.pick(logits) == 1  # 5 / 2 < 4
    assert logits[0] == 5.0  # the caller's row is not changed


def test_bitmask_bits_are_token_flags_and_logprobs_are_a_distribution() -> None:
    bitmask = np.zeros((1, 2), dtype=np.int32)
    bitmask[0, 0] = 1 << 3
    bitmask[0, 1] = 1 << 1  # token 33
    assert np.nonzero(allowed_tokens(bitmask, 40))[0].tolist() == [3, 33]
    row = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    logprob, top = logprobs_of(row, 1, 2)
    assert [t for t, _ in top] == [2, 1] and top[1][1] == logprob
    assert abs(sum(np.exp(lp) for _, lp in logprobs_of(row, 0, 3)[1]) - 1.0) < 1e-9


def test_cuda_comes_first_when_onnxruntime_has_it() -> None:
    assert choose_providers(["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    both = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert choose_providers(both) == ["CUDAExecutionProvider", "CPUExecutionProvider"]


def test_any_int64_seed_is_taken_negative_included() -> None:
    logits = np.array([0.0, 1.0, 0.5], dtype=np.float32)
    for seed in (-1, -(2**63), 2**63 - 1):
        picks = [Sampler(1.0, 1.0, seed=seed).pick(logits) for _ in range(3)]
        assert len(set(picks)) == 1  # seeded: the same pick every time
