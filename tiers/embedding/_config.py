"""Typed configuration of the embedding tier (``[embedding]``, ``[embedding.vllm]``)."""

from __future__ import annotations

from typing import Literal

import msgspec

# Under the build cache (scripts/setup.sh → tiergate models export-embedding): a link to the current export.
DEFAULT_EMBEDDING_MODEL_DIR = "models/all-minilm-l6-v2-onnx"


class VllmEmbedding(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A vLLM pooling server (``vllm serve <model folder> --runner pooling``) that computes the vectors
    instead of ONNX Runtime in this process (``backend = "vllm"``)."""

    # Its replicas; a request's misses go to the next one in turn, and on to the others when one
    # cannot be reached.
    urls: list[str] = msgspec.field(default_factory=list)
    # The name the server serves the model under (its --served-model-name); empty: embedding.model.
    served_model_name: str = ""
    api_key: str = ""  # sent as a bearer token when set (its --api-key)
    connect_s: float = 2.0
    total_s: float = 30.0  # one call to it, from connect to its last byte


class EmbeddingConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """all-MiniLM-L6-v2 (or another BERT sentence-transformers model exported the same way) behind
    ``POST /v1/embeddings``: on ONNX Runtime in the gateway's process, or on a vLLM pooling server."""

    enabled: bool = True
    # "onnx": in this process; "vllm": the servers in [embedding.vllm]. Tokenizing, limits, the
    # cache and billing stay in the gateway either way (the servers get token ids).
    backend: Literal["onnx", "vllm"] = "onnx"
    vllm: VllmEmbedding = msgspec.field(default_factory=VllmEmbedding)
    # Load the model when the gateway starts (about 2 s and 150 MB); false: on the first request for it
    # (that request waits for the load), so a gateway that never embeds never pays for it.
    preload: bool = False
    # The ONNX export folder (model.onnx, tokenizer.json, embedding.json); empty: <build_cache_dir>/
    # models/all-minilm-l6-v2-onnx. A folder without model.onnx leaves /v1/embeddings answering 404.
    # With backend = "vllm" only its tokenizer.json (and embedding.json or config.json) are read: the
    # export or the model's own Hugging Face folder, the one the server serves.
    model_dir: str = ""
    model: str = "all-MiniLM-L6-v2"  # the name clients send and /v1/models lists
    # More names clients may send for it (e.g. "text-embedding-3-small" for tools that hard-code one).
    aliases: list[str] = msgspec.field(default_factory=list)
    # Rows in one ONNX call (vllm: in one call to the server); inputs waiting are sorted by length and
    # cut into calls of at most this many rows and max_batch_tokens padded tokens (rows × longest row;
    # onnx only: the server batches by itself).
    max_batch: int = 64
    max_batch_tokens: int = 16384
    # Inputs waiting for the model, all requests together; a request that would pass it gets 429.
    max_queue: int = 4096
    # Inputs in one request (OpenAI's limit is 2048) and tokens in one input, [CLS] and [SEP]
    # included (0: the model's own limit, 256 for all-MiniLM-L6-v2; longer inputs are a 400).
    max_inputs: int = 2048
    max_input_tokens: int = 0
    # ONNX Runtime's intra-op threads (0: its default, one per core; onnx only).
    threads: int = 0

    def __post_init__(self) -> None:
        if self.backend == "vllm" and not self.vllm.urls:
            raise ValueError('embedding.backend = "vllm" needs the servers in embedding.vllm.urls')
        for url in self.vllm.urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"embedding.vllm.urls: {url!r} is not an http(s) URL")
