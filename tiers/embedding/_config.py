"""Typed configuration of the embedding tier (``[embedding]``)."""

from __future__ import annotations

import msgspec

# Under the build cache (scripts/setup.sh → tiergate models export-embedding): a link to the current export.
DEFAULT_EMBEDDING_MODEL_DIR = "models/all-minilm-l6-v2-onnx"


class EmbeddingConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """all-MiniLM-L6-v2 (or another BERT sentence-transformers model exported the same way) on ONNX
    Runtime, in the gateway's process, behind ``POST /v1/embeddings``."""

    enabled: bool = True
    # Load the model when the gateway starts (about 2 s and 150 MB); false: on the first request for it
    # (that request waits for the load), so a gateway that never embeds never pays for it.
    preload: bool = False
    # The ONNX export folder (model.onnx, tokenizer.json, embedding.json); empty: <build_cache_dir>/
    # models/all-minilm-l6-v2-onnx. A folder without model.onnx leaves /v1/embeddings answering 404.
    model_dir: str = ""
    model: str = "all-MiniLM-L6-v2"  # the name clients send and /v1/models lists
    # More names clients may send for it (e.g. "text-embedding-3-small" for tools that hard-code one).
    aliases: list[str] = msgspec.field(default_factory=list)
    # Rows in one ONNX call; inputs waiting are sorted by length and cut into calls of at most
    # this many rows and max_batch_tokens padded tokens (rows × longest row).
    max_batch: int = 64
    max_batch_tokens: int = 16384
    # Inputs waiting for the model, all requests together; a request that would pass it gets 429.
    max_queue: int = 4096
    # Inputs in one request (OpenAI's limit is 2048) and tokens in one input, [CLS] and [SEP]
    # included (0: the model's own limit, 256 for all-MiniLM-L6-v2; longer inputs are a 400).
    max_inputs: int = 2048
    max_input_tokens: int = 0
    # ONNX Runtime's intra-op threads (0: its default, one per core).
    threads: int = 0
