"""The embedding tier: a sentence-transformers BERT model exported to ONNX (BERT, mean pooling and L2
normalisation in one graph; gateway/tools/modelbuild/embed_export.py), on ONNX Runtime in this process.

Tokenizing is the ``tokenizers`` library on the model's own ``tokenizer.json`` (its padding and
truncation switched off: padding is the batcher's, and an input over the limit is refused, not cut).
Inputs are token ids; the tier checks their count and range, the gateway owns the rest of the request.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tiers._errors import TierRejected, TierUnavailable
from tiers.embedding._batcher import Batcher, Observe, Rows, Vectors
from tiers.embedding._config import EmbeddingConfig

log = logging.getLogger(__name__)


class OnnxEmbedder:
    """``embed(rows)`` → one unit vector per row of token ids, batched with every other caller's."""

    def __init__(self, config: EmbeddingConfig, *, name: str = "embedding", observe: Observe | None = None):
        self.config = config
        self.name = name
        self.model = config.model
        self._dir = Path(config.model_dir).expanduser()
        meta = self._meta()
        self.dimensions = int(meta.get("dimensions", 384))
        self.vocab_size = int(meta.get("vocab_size", 30522))
        self.max_tokens = config.max_input_tokens or int(meta.get("max_tokens", 256))
        self._tokenizer: Any = None
        self._session: Any = None
        self._available = (self._dir / "model.onnx").is_file() and (self._dir / "tokenizer.json").is_file()
        self._loading = asyncio.Lock()
        self._batcher = Batcher(
            self._run,
            self.dimensions,
            name=name,
            max_batch=config.max_batch,
            max_batch_tokens=max(config.max_batch_tokens, self.max_tokens),
            max_queue=config.max_queue,
            observe=observe or (lambda rows, width: None),
        )

    def _meta(self) -> dict[str, Any]:
        path = self._dir / "embedding.json"
        return dict(json.loads(path.read_text())) if path.is_file() else {}

    @property
    def available(self) -> bool:
        """Whether the export was there at start (``scripts/setup.sh`` builds it)."""
        return self._available

    @property
    def queued(self) -> int:
        return self._batcher.queued

    async def start(self) -> None:
        if not self.available:
            log.warning(
                "embedding model not found in %s (run scripts/setup.sh); /v1/embeddings is off", self._dir
            )
        elif self.config.preload:
            await self.loaded()

    async def loaded(self) -> None:
        """Load the model unless it is loaded (once, beside the event loop; callers meanwhile wait)."""
        if self._session is not None:
            return
        async with self._loading:
            if self._session is not None:
                return
            try:
                await asyncio.to_thread(self.load)
            except Exception as exc:  # a corrupt or unreadable export
                raise TierUnavailable(self.name, f"cannot load the model from {self._dir}: {exc}") from exc
            self._batcher.start()
        log.info("embedding tier ready: %s (%d dimensions) from %s", self.model, self.dimensions, self._dir)

    def load(self) -> None:
        """Read the tokenizer and make the ONNX Runtime session (blocking; :meth:`start` runs it aside)."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.config.threads
        options.inter_op_num_threads = 1
        # Idle pool threads sleep instead of spinning: they would take the cores the event loop needs
        # to answer (and, in the benchmark, the client's) between two calls.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(self._dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer = tokenizer

    def session(self) -> Any:
        """The ONNX Runtime session itself, as :meth:`load` made it (the benchmark's baseline)."""
        return self._session

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with [CLS] and [SEP], not cut to any length."""
        if self._tokenizer is None:
            raise TierUnavailable(self.name, "the embedding model is not loaded")
        return [e.ids for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=True)]

    def check(self, rows: Rows, param: str = "input") -> None:
        """Refuse (400) an input that is empty, too long for the model, or holds ids not in its vocabulary."""
        for i, row in enumerate(rows):
            if not row:
                raise TierRejected(self.name, f"{param}[{i}] is empty", code="invalid_value", param=param)
            if len(row) > self.max_tokens:
                raise TierRejected(
                    self.name,
                    f"This model's maximum context length is {self.max_tokens} tokens; {param}[{i}] is "
                    f"{len(row)} tokens. Shorten it.",
                    code="context_length_exceeded",
                    param=param,
                )
            if min(row) < 0 or max(row) >= self.vocab_size:
                raise TierRejected(
                    self.name,
                    f"{param}[{i}] holds a token id outside the vocabulary (0..{self.vocab_size - 1})",
                    code="invalid_value",
                    param=param,
                )

    async def embed(self, rows: Rows) -> Vectors:
        await self.loaded()
        return await self._batcher.embed(rows)

    def _run(self, rows: Rows) -> Vectors:
        """One padded ONNX call (on the batcher's worker thread)."""
        width = max(map(len, rows))
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        (out,) = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
        return np.asarray(out, dtype=np.float32)

    async def aclose(self) -> None:
        await self._batcher.aclose()
