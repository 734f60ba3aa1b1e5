"""The in-process embedding backend: a sentence-transformers BERT model exported to ONNX (BERT, mean
pooling and L2 normalisation in one graph; gateway/tools/modelbuild/embed_export.py), on ONNX Runtime in
this process, its inputs from every request batched into padded calls (``_batcher.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tiers.embedding._base import Embedder
from tiers.embedding._batcher import Batcher, Observe, Rows, Vectors
from tiers.embedding._config import EmbeddingConfig


class OnnxEmbedder(Embedder):
    """``embed(rows)`` → one unit vector per row of token ids, batched with every other caller's."""

    def __init__(self, config: EmbeddingConfig, *, name: str = "embedding", observe: Observe | None = None):
        super().__init__(config, name)
        self._session: Any = None
        self._batcher = Batcher(
            self._run,
            self.dimensions,
            name=name,
            max_batch=config.max_batch,
            max_batch_tokens=max(config.max_batch_tokens, self.max_tokens),
            max_queue=config.max_queue,
            observe=observe or (lambda rows, width: None),
        )

    def _found(self) -> bool:
        return super()._found() and (self._dir / "model.onnx").is_file()

    @property
    def queued(self) -> int:
        return self._batcher.queued

    def load(self) -> None:
        """Make the ONNX Runtime session, then read the tokenizer (blocking; run beside the loop)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.config.threads
        options.inter_op_num_threads = 1
        # Idle pool threads sleep instead of spinning: they would take the cores the event loop needs
        # to answer (and, in the benchmark, the client's) between two calls.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(
            str(self._dir / "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        super().load()

    def _engine_ready(self) -> None:
        self._batcher.start()

    def session(self) -> Any:
        """The ONNX Runtime session itself, as :meth:`load` made it (the benchmark's baseline)."""
        return self._session

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
