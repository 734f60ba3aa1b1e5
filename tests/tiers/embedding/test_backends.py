"""``[embedding] backend``: which backend the settings make, and the settings refused before anything
starts (the servers themselves: tests/integration/test_embeddings_vllm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gateway.settings import Settings, SettingsError, load_settings
from tiers.embedding import EmbeddingConfig, OnnxEmbedder, VllmEmbedder, make_embedder


def settings_from(tmp_path: Path, toml: str) -> Settings:
    path = tmp_path / "tiergate.toml"
    path.write_text(toml)
    return load_settings(path, environ={})


def test_vllm_without_servers_or_with_a_non_http_url_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"embedding\.vllm\.urls"):
        settings_from(tmp_path, '[embedding]\nbackend = "vllm"\n')
    with pytest.raises(SettingsError, match="not an http"):
        settings_from(
            tmp_path, '[embedding]\nbackend = "vllm"\n[embedding.vllm]\nurls = ["127.0.0.1:8000"]\n'
        )
    with pytest.raises(SettingsError, match="backend"):
        settings_from(tmp_path, '[embedding]\nbackend = "tensorrt"\n')


def test_each_backend_is_its_own_tier_and_reads_only_what_it_needs(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")  # no model.onnx: only the vLLM backend can serve
    toml = (
        f'[embedding]\nmodel_dir = "{tmp_path}"\nbackend = "vllm"\n[embedding.vllm]\nurls = ["http://h:1/"]\n'
    )
    config = settings_from(tmp_path, toml).embedding
    remote = make_embedder(config)
    assert isinstance(remote, VllmEmbedder) and remote.name == "embedding-vllm" and remote.available
    assert remote.urls == ["http://h:1"]
    local = make_embedder(EmbeddingConfig(model_dir=str(tmp_path)))
    assert isinstance(local, OnnxEmbedder) and local.name == "embedding" and not local.available


def test_a_hugging_face_folder_gives_the_model_its_size_and_limit(tmp_path: Path) -> None:
    """The folder vLLM serves has no embedding.json: its config.json and sentence_bert_config.json say."""
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 768, "vocab_size": 50000}))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    embedder = make_embedder(EmbeddingConfig(model_dir=str(tmp_path)))
    assert (embedder.dimensions, embedder.vocab_size, embedder.max_tokens) == (768, 50000, 128)
