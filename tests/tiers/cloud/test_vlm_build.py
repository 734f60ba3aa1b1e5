"""The embedded cloud VLM that scripts/build_cloud_model.py built: its configs say what vLLM needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.settings import load_settings

MODEL = Path(load_settings(environ={}).local_vllm().model_dir)

pytestmark = pytest.mark.skipif(
    not (MODEL / "tiergate-build.json").exists(), reason=f"{MODEL} not built (scripts/setup.sh builds it)"
)


def test_the_vlm_is_idefics3_with_a_tied_head_and_an_in_vocabulary_pad() -> None:
    config = json.loads((MODEL / "config.json").read_text())
    text = config["text_config"]
    assert config["architectures"] == ["Idefics3ForConditionalGeneration"]
    assert config["tie_word_embeddings"] and text["tie_word_embeddings"]
    assert 0 <= config["pad_token_id"] < text["vocab_size"] and text["pad_token_id"] == config["pad_token_id"]
    assert text["vocab_size"] == 49152 + 40  # SmolLM2's vocabulary plus the image tokens
    vision = config["vision_config"]
    tokens_per_tile = (vision["image_size"] // vision["patch_size"]) ** 2 // config["scale_factor"] ** 2
    processor = json.loads((MODEL / "processor_config.json").read_text())
    assert processor["image_seq_len"] == tokens_per_tile == 16


def test_the_image_tokens_are_in_the_tokenizer_and_the_build_checked_text_answers() -> None:
    tokenizer = json.loads((MODEL / "tokenizer.json").read_text())
    added = {t["content"]: t["id"] for t in tokenizer["added_tokens"]}
    config = json.loads((MODEL / "config.json").read_text())
    assert added["<image>"] == config["image_token_id"]
    assert {"<fake_token_around_image>", "<global-img>", "<row_1_col_1>", "<row_6_col_6>"} <= set(added)
    build = json.loads((MODEL / "tiergate-build.json").read_text())
    assert build["model"] == "smolvlm-135m" and "Paris" in build["text_check"][0]
