"""The edge tier on ONNX Runtime: a decoder exported by ``tiergate models export-onnx``.

The folder holds ``model.onnx`` (fp32) and ``model.int8.onnx`` (dynamically quantised), ``decoder.json``
(layers, KV heads, head size, end-of-turn ids) and the model's ``tokenizer.json``.  The graph takes
``input_ids`` and every layer's past keys and values and returns the last position's logits and the grown
KV cache, so the prompt runs in one call and each further token in one call with the cache fed back.
Prompts are rendered with the shared template (:mod:`tiers.edge._text`), like the llama.cpp tier's.

Prompt-prefix reuse: the keys and values of the last generation are kept, and those of long prompts saved
(:class:`PrefixStore`); a prompt that starts like one of them runs only its new tokens on the cut cache.

Queueing, the worker thread and cancellation are :class:`SerialEngineTier`'s; the decode loop (sampling,
grammars, logprobs, ``n`` answers) is :mod:`tiers.edge._decode`'s, this module its
:class:`~tiers.edge._decode.Engine`.  Execution providers are the ones onnxruntime reports, CUDA first when
present; intra-op threads default to one fewer than the cores (ONNX Runtime's pool spin-waits like
llama.cpp's) and graph optimisation is set to ALL.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiers._errors import TierRejected, TierUnavailable
from tiers._types import Generation
from tiers.edge._config import EdgeConfig, default_threads
from tiers.edge._decode import Decoder, Emit, Vocabulary, budget_for, special_free
from tiers.edge._prefix import MIN_GAIN_TOKENS, shared_prefix
from tiers.edge._sampling import Row
from tiers.edge._serial import SerialEngineTier
from tiers.edge._text import prompt_text, render_prompt

FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
PREFERRED_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")


def choose_providers(available: list[str]) -> list[str]:
    """CUDA first when onnxruntime has it, then the CPU; anything else onnxruntime offers is not used."""
    chosen = [p for p in PREFERRED_PROVIDERS if p in available]
    return chosen or list(available)


def providers_device(providers: list[str]) -> str:
    """Where a session with these providers runs its graph: CUDA's device 0 (the session's default
    ``device_id``) when CUDA is among them, else the CPU."""
    return "cuda:0" if "CUDAExecutionProvider" in providers else "cpu"


@dataclass(frozen=True)
class DecoderShape:
    layers: int
    kv_heads: int
    head_dim: int
    eos_token_ids: frozenset[int]
    bos_token: str
    eos_token: str

    @classmethod
    def read(cls, folder: Path) -> DecoderShape:
        meta = json.loads((folder / "decoder.json").read_text())
        return cls(
            layers=int(meta["layers"]),
            kv_heads=int(meta["kv_heads"]),
            head_dim=int(meta["head_dim"]),
            eos_token_ids=frozenset(int(t) for t in meta["eos_token_ids"]),
            bos_token=meta.get("bos_token") or "",
            eos_token=meta.get("eos_token") or "",
        )


class ChatPrompt:
    """Messages (and tools) → prompt token ids: the shared template, then the export's tokenizer."""

    def __init__(self, folder: Path, shape: DecoderShape) -> None:
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._shape = shape

    def ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        text = render_prompt(messages, tools, self._shape.bos_token, self._shape.eos_token)
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def ids_of(self, gen: Generation) -> list[int]:
        """``gen``'s prompt token ids: its chat rendered, or a legacy completion's prompt as it is (with
        what the tokenizer adds to a plain text: a BOS, if the model wants one)."""
        text, special = prompt_text(gen, self._shape.bos_token, self._shape.eos_token)
        return list(self.tokenizer.encode(text, add_special_tokens=special).ids)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet back to bytes (the inverse of its ``bytes_to_unicode``)."""
    spans = [(ord("!"), ord("~")), (ord("¡"), ord("¬")), (ord("®"), ord("ÿ"))]
    printable = [b for first, last in spans for b in range(first, last + 1)]
    codes = list(printable)
    shift = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + shift)
            shift += 1
    return {chr(c): b for b, c in zip(printable, codes, strict=True)}


def vocabulary(folder: Path, tokenizer: Any, end: frozenset[int]) -> Vocabulary:
    """Every token's bytes (byte-level BPE, as SmolLM2's tokenizer is; other decoders per token), the
    end-of-generation tokens, and llguidance's tokenizer when llguidance is installed."""
    source = (folder / "tokenizer.json").read_text()
    spec = json.loads(source)
    specials = {int(a["id"]) for a in spec.get("added_tokens", ()) if a.get("special")}
    size = int(tokenizer.get_vocab_size(with_added_tokens=True))
    byte_level = (spec.get("decoder") or {}).get("type") == "ByteLevel"
    table = _byte_decoder()
    shown = []
    for token in range(size):
        name = tokenizer.id_to_token(token) or ""
        if token in specials:
            shown.append(name.encode())
        elif byte_level and all(c in table for c in name):
            shown.append(bytes(table[c] for c in name))
        else:
            shown.append(str(tokenizer.decode([token], skip_special_tokens=False)).encode())
    special = np.zeros(size, dtype=np.bool_)
    special[sorted(t for t in specials if t < size)] = True
    guide = None
    if importlib.util.find_spec("llguidance") is not None:
        from llguidance import LLTokenizer

        guide = LLTokenizer(source, n_vocab=size, eos_token=sorted(end))
    return Vocabulary(special_free(shown, special), shown, end, guide)


def broken_int8(folder: Path) -> str:
    """Why the export's INT8 graph must not serve, or "" when it may: the export's own check
    (``tiergate-build.json``) found it agreeing with transformers on no reference token, so its answers
    are noise (seen with quantize_dynamic and the packages of December 2026; docs/edge.md, "INT8")."""
    record = folder / "tiergate-build.json"
    if not record.exists():
        return ""
    agreement = json.loads(record.read_text()).get("agreement", {}).get(INT8_FILE, "")
    if not agreement.startswith("0/"):
        return ""
    return (
        f"the export's INT8 graph agrees with transformers on {agreement.split(' ')[0]} reference tokens "
        "(tiergate-build.json): its answers would be noise; serve the fp32 graph "
        "(edge.onnx_quantized = false)"
    )


class OnnxTier(SerialEngineTier):
    thread_name = "onnx"

    def __init__(self, config: EdgeConfig, instance: str = "") -> None:
        super().__init__(config, instance)
        self._session: Any = None
        self._prompt: ChatPrompt | None = None
        self._shape: DecoderShape | None = None
        self._vocab: Vocabulary | None = None
        self._providers: list[str] = []
        # The keys and values of the last generation (token ids, arrays), and saved ones of long prompts.
        self._live: tuple[list[int], list[np.ndarray[Any, Any]]] | None = None

    @property
    def model_file(self) -> Path:
        folder = Path(self._config.onnx_model_dir).expanduser()
        return folder / (INT8_FILE if self._config.onnx_quantized else FP32_FILE)

    def describe(self) -> str:
        kind = "int8" if self._config.onnx_quantized else "fp32"
        threads = self._config.threads or default_threads()
        return f"onnxruntime {kind} on {', '.join(self._providers)}, {threads} threads"

    def _unload(self) -> None:
        self._session = None
        self._live = None
        self._vocab = None

    # -- on the worker thread -------------------------------------------------

    def _load(self) -> None:
        import onnxruntime as ort

        path = self.model_file
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist (run: tiergate models export-onnx)")
        if self._config.onnx_quantized:
            refused = broken_int8(path.parent)
            if refused:
                raise ValueError(refused)
        shape = DecoderShape.read(path.parent)
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._config.threads or default_threads()
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self._providers = choose_providers(ort.get_available_providers())
        self._session = ort.InferenceSession(str(path), options, providers=self._providers)
        self._providers = list(self._session.get_providers())
        self.device = providers_device(self._providers)
        self._prompt = ChatPrompt(path.parent, shape)
        self._vocab = vocabulary(path.parent, self._prompt.tokenizer, shape.eos_token_ids)
        self._shape = shape

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        session, chat, shape, vocab = self._session, self._prompt, self._shape, self._vocab
        if session is None or chat is None or shape is None or vocab is None:
            raise TierUnavailable(self.name, "model not loaded")
        try:
            prompt = chat.ids_of(gen)
        except ValueError as exc:
            raise TierRejected(self.name, str(exc)) from exc
        budget = budget_for(gen, len(prompt), self._config.context_tokens, self.name)
        decoder = Decoder(self.name, _OnnxEngine(self, session, shape), vocab, gen)
        if not decoder.run(prompt, budget, emit, cancel):
            return
        if self._live is not None and self.prefixes.wants(prompt):
            ids, arrays = self._live
            self.prefixes.put(ids, self._live, sum(a.nbytes for a in arrays))

    def _reusable(self, prompt: list[int]) -> tuple[int, list[np.ndarray[Any, Any]] | None]:
        """How many leading prompt tokens already have keys and values (in the last generation's cache
        or a saved one), and those, cut to length. One token is always left to run, for its logits."""
        best, arrays = 0, None
        if self._live is not None:
            best, arrays = shared_prefix(self._live[0], prompt), self._live[1]
        if self.prefixes.enabled:
            saved, state = self.prefixes.best(prompt)
            if state is not None and saved >= best + MIN_GAIN_TOKENS:
                best, arrays = saved, state[1]
                self.prefixes.hits += 1
        best = min(best, len(prompt) - 1)
        if best <= 0 or arrays is None:
            return 0, None
        return best, [np.ascontiguousarray(a[:, :, :best, :]) for a in arrays]

    def _empty_cache(self) -> list[np.ndarray[Any, Any]]:
        assert self._shape is not None
        empty = np.zeros((1, self._shape.kv_heads, 0, self._shape.head_dim), dtype=np.float32)
        return [empty] * (2 * self._shape.layers)


class _OnnxEngine:
    """The decode loop's engine on an ONNX Runtime session: one ``run`` per step, the cache fed back.
    The tier's live cache follows every step (the next request reuses it)."""

    def __init__(self, tier: OnnxTier, session: Any, shape: DecoderShape) -> None:
        self._tier = tier
        self._session = session
        names = [f"present.{i}.{kind}" for i in range(shape.layers) for kind in ("key", "value")]
        self._outputs = ["logits", *names]
        self._past = [n.replace("present.", "past_key_values.", 1) for n in names]
        self._ids: list[int] = []
        self._cache: list[np.ndarray[Any, Any]] = []
        self._prompt: tuple[list[int], list[np.ndarray[Any, Any]]] = ([], [])

    def _run(self, pending: list[int]) -> Row:
        feed: dict[str, np.ndarray[Any, Any]] = dict(zip(self._past, self._cache, strict=True))
        feed["input_ids"] = np.asarray([pending], dtype=np.int64)
        logits, *cache = self._session.run(self._outputs, feed)
        self._ids = self._ids + pending
        self._cache = cache
        self._tier._live = (self._ids, cache)
        row: Row = logits[0, -1]
        return row

    def prefill(self, prompt: list[int]) -> tuple[Row, int]:
        start, reused = self._tier._reusable(prompt)
        self._ids = prompt[:start]
        self._cache = self._tier._empty_cache() if reused is None else reused
        row = self._run(prompt[start:]).copy()
        self._prompt = (self._ids, self._cache)
        return row, start

    def advance(self, token: int) -> Row:
        return self._run([token])

    def rewind(self, length: int) -> None:
        ids, cache = self._prompt
        assert len(ids) == length
        self._ids, self._cache = ids, cache
        self._tier._live = (ids, cache)
