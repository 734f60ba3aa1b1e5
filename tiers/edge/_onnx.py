"""The edge tier on ONNX Runtime: a decoder exported by ``tiergate models export-onnx``.

The folder holds ``model.onnx`` (fp32) and ``model.int8.onnx`` (dynamically quantised), ``decoder.json``
(layers, KV heads, head size, end-of-turn ids), the model's ``tokenizer.json`` and chat template.  The graph
takes ``input_ids`` and every layer's past keys and values and returns the last position's logits and the
grown KV cache, so the prompt runs in one call and each further token in one call with the cache fed back.

Prompt-prefix reuse: the keys and values of the last generation are kept, and those of long prompts saved
(:class:`PrefixStore`); a prompt that starts like one of them runs only its new tokens on the cut cache.

Queueing, the worker thread and cancellation are :class:`SerialEngineTier`'s.  Execution providers are the
ones onnxruntime reports, CUDA first when present; intra-op threads default to one fewer than the cores
(ONNX Runtime's pool spin-waits like llama.cpp's) and graph optimisation is set to ALL.
"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tiers._errors import TierRejected, TierUnavailable
from tiers._events import Finished, TextDelta
from tiers._types import Generation, Usage
from tiers.edge._config import EdgeConfig, default_threads
from tiers.edge._prefix import MIN_GAIN_TOKENS, shared_prefix
from tiers.edge._sampling import IncrementalDetokenizer, Sampler
from tiers.edge._serial import DEFAULT_TEMPERATURE, DEFAULT_TOP_P, Emit, SerialEngineTier
from tiers.edge._text import StopScanner, flatten_messages

FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
PREFERRED_PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")


def choose_providers(available: list[str]) -> list[str]:
    """CUDA first when onnxruntime has it, then the CPU; anything else onnxruntime offers is not used."""
    chosen = [p for p in PREFERRED_PROVIDERS if p in available]
    return chosen or list(available)


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
    """Messages → prompt token ids, rendered with the model's own chat template the way transformers'
    ``apply_chat_template`` renders it (sandboxed jinja2, ``trim_blocks``, ``lstrip_blocks``)."""

    def __init__(self, folder: Path, shape: DecoderShape) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        template_file = folder / "chat_template.jinja"
        if template_file.exists():
            source = template_file.read_text()
        else:
            source = json.loads((folder / "tokenizer_config.json").read_text()).get("chat_template") or ""
        if not source:
            raise ValueError(f"{folder} carries no chat template")
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["raise_exception"] = _raise_template_error
        self._template = env.from_string(source)
        self._shape = shape

    def ids(self, messages: list[dict[str, Any]]) -> list[int]:
        text = self._template.render(
            messages=flatten_messages(messages),
            add_generation_prompt=True,
            bos_token=self._shape.bos_token,
            eos_token=self._shape.eos_token,
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)


def _raise_template_error(message: str) -> None:
    raise ValueError(f"chat template: {message}")


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
        self._prompt = ChatPrompt(path.parent, shape)
        self._shape = shape

    def _empty_cache(self) -> dict[str, np.ndarray[Any, Any]]:
        assert self._shape is not None
        empty = np.zeros((1, self._shape.kv_heads, 0, self._shape.head_dim), dtype=np.float32)
        layers = range(self._shape.layers)
        names = (f"past_key_values.{i}.{kind}" for i in layers for kind in ("key", "value"))
        return dict.fromkeys(names, empty)

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        session, chat, shape = self._session, self._prompt, self._shape
        if session is None or chat is None or shape is None:
            raise TierUnavailable(self.name, "model not loaded")
        try:
            prompt = chat.ids(gen.messages)
        except ValueError as exc:
            raise TierRejected(self.name, str(exc)) from exc
        context = self._config.context_tokens
        room = context - len(prompt)
        if room <= 0 or (gen.max_tokens is not None and gen.max_tokens > room):
            raise TierRejected(
                self.name,
                f"the prompt is {len(prompt)} tokens and max_tokens is {gen.max_tokens}; "
                f"the edge model's context is {context} tokens",
            )
        budget = min(gen.max_tokens or room, room)
        sampler = Sampler(
            temperature=DEFAULT_TEMPERATURE if gen.temperature is None else gen.temperature,
            top_p=DEFAULT_TOP_P if gen.top_p is None else gen.top_p,
            seed=gen.seed if gen.seed is not None else random.getrandbits(32),
            presence_penalty=gen.presence_penalty or 0.0,
            frequency_penalty=gen.frequency_penalty or 0.0,
        )
        cache_names = [f"present.{i}.{kind}" for i in range(shape.layers) for kind in ("key", "value")]
        past_names = [n.replace("present.", "past_key_values.", 1) for n in cache_names]
        outputs = ["logits", *cache_names]
        start, reused = self._reusable(prompt)
        feed: dict[str, np.ndarray[Any, Any]] = (
            self._empty_cache() if reused is None else dict(zip(past_names, reused, strict=True))
        )
        pending = prompt[start:]  # fed in the next run; the cache then covers `covered`
        covered = prompt[:start]
        feed["input_ids"] = np.asarray([pending], dtype=np.int64)
        detokenizer = IncrementalDetokenizer(chat.tokenizer)
        scanner = StopScanner(gen.stop)
        produced = 0
        finish = "length"
        while produced < budget:
            if cancel.is_set():
                return
            logits, *cache = session.run(outputs, feed)
            covered = covered + pending
            self._live = (covered, cache)
            token = sampler.pick(logits[0, -1])
            if token in shape.eos_token_ids:
                finish = "stop"
                break
            produced += 1
            ready, stopped = scanner.feed(detokenizer.feed(token))
            if ready:
                emit(TextDelta(ready))
            if stopped:
                finish = "stop"
                break
            feed = dict(zip(past_names, cache, strict=True))
            pending = [token]
            feed["input_ids"] = np.asarray([pending], dtype=np.int64)
        if not scanner.stopped:
            rest = scanner.flush(detokenizer.flush())
            if rest:
                emit(TextDelta(rest))
        emit(Finished(finish, Usage(len(prompt), produced)))
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
