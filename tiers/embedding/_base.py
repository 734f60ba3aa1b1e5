"""What every embedding backend shares: the model's tokenizer and its limits, read from the model folder.

Tokenizing is the ``tokenizers`` library on the model's own ``tokenizer.json`` (its padding and
truncation switched off: padding is the engine's, and an input over the limit is refused, not cut).
Inputs reach a backend as token ids, so the cache key, the limits and the tokens billed are the
gateway's own whichever engine computes the vectors.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tiers._errors import TierRejected, TierUnavailable
from tiers.embedding._batcher import Rows, Vectors
from tiers.embedding._config import EmbeddingConfig

log = logging.getLogger(__name__)


def model_facts(folder: Path) -> dict[str, Any]:
    """dimensions, vocab_size and max_tokens: from the export's embedding.json, else from a Hugging Face
    sentence-transformers folder (config.json, sentence_bert_config.json)."""
    export = folder / "embedding.json"
    if export.is_file():
        return dict(json.loads(export.read_text()))
    facts: dict[str, Any] = {}
    if (folder / "config.json").is_file():
        config = json.loads((folder / "config.json").read_text())
        facts = {"dimensions": config.get("hidden_size"), "vocab_size": config.get("vocab_size")}
    if (folder / "sentence_bert_config.json").is_file():
        facts["max_tokens"] = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
    return {k: v for k, v in facts.items() if v is not None}


class Embedder:
    """``tokenize(texts)``, ``check(rows)``, then ``embed(rows)`` → one unit vector per row of token ids.
    A backend fills in :meth:`_engine_ready` (what is needed besides the tokenizer) and :meth:`embed`."""

    def __init__(self, config: EmbeddingConfig, name: str) -> None:
        self.config = config
        self.name = name
        self.model = config.model
        self._dir = Path(config.model_dir).expanduser()
        facts = model_facts(self._dir)
        self.dimensions = int(facts.get("dimensions", 384))
        self.vocab_size = int(facts.get("vocab_size", 30522))
        self.max_tokens = config.max_input_tokens or int(facts.get("max_tokens", 256))
        self._available = self._found()  # checked once: model_names asks on every request
        self._tokenizer: Any = None
        self._ready = False  # set on the event loop once loaded: requests may use it
        self._loading = asyncio.Lock()

    @property
    def available(self) -> bool:
        """Whether what the backend needs was there at start (``scripts/setup.sh`` builds it)."""
        return self._available

    def _found(self) -> bool:
        """Whether the folder holds what this backend loads."""
        return (self._dir / "tokenizer.json").is_file()

    @property
    def queued(self) -> int:
        return 0

    async def start(self) -> None:
        if not self.available:
            log.warning(
                "embedding model not found in %s (run scripts/setup.sh); /v1/embeddings is off", self._dir
            )
        elif self.config.preload:
            await self.loaded()

    async def loaded(self) -> None:
        """Load the model unless it is loaded (once, beside the event loop; callers meanwhile wait)."""
        if self._ready:
            return
        async with self._loading:
            if self._ready:
                return
            try:
                await asyncio.to_thread(self.load)
            except Exception as exc:  # a corrupt or unreadable folder
                raise TierUnavailable(self.name, f"cannot load the model from {self._dir}: {exc}") from exc
            self._engine_ready()
            self._ready = True
        log.info("embedding tier %s ready: %s (%d dimensions)", self.name, self.model, self.dimensions)

    def load(self) -> None:
        """Read the tokenizer (blocking; :meth:`loaded` runs it aside)."""
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(self._dir / "tokenizer.json"))
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self._tokenizer = tokenizer

    def _engine_ready(self) -> None:
        """On the event loop, once :meth:`load` is done."""

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids with [CLS] and [SEP], not cut to any length."""
        if self._tokenizer is None:
            raise TierUnavailable(self.name, "the embedding model is not loaded")
        if len(texts) == 1:  # one text (the common request): encode skips the batch's thread pool
            return [self._tokenizer.encode(texts[0], add_special_tokens=True).ids]
        return [e.ids for e in self._tokenizer.encode_batch(list(texts), add_special_tokens=True)]

    @property
    def local(self) -> bool:
        """Whether the model runs in this process (vLLM pooling servers are reached over the network)."""
        return self.config.backend != "vllm"

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
        raise NotImplementedError

    async def aclose(self) -> None:
        """Stop what the backend started."""
