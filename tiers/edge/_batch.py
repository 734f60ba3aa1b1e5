"""The llama.cpp edge tier with continuous batching: many requests decoded together in one context.

Every request in flight is a sequence (a sequence id) in one llama.cpp context with a unified KV cache
(``n_seq_max`` sequences, ``kv_unified``).  The worker thread runs steps: each step is one
``llama_decode`` of one batch that holds the next token of every decoding sequence and, in the room left,
a chunk of a joining request's prompt (at most :data:`PREFILL_CHUNK` tokens while others decode, so their
streams are not stalled by a long prompt).  Each sequence's logits row goes to its own decode loop
(:meth:`tiers.edge._decode.Decoder.steps`: per-request sampling, seeds, penalties, grammars, logprobs,
stops, ``n`` answers), which gives back the token to append next.  Requests join between steps, up to
as many as the batch measurably sustains (:class:`tiers._slots.SustainedSlots`, from the pure decode
steps' times, at most ``edge.max_sequences``); the others wait (FIFO, at most ``edge.max_queue``).  A
finished or cancelled sequence leaves at once and its KV cells are freed (``llama_memory_seq_rm``).

Prompt-prefix reuse: the cells of a finished request's tokens (prompt and answer) are kept as a *prefix
slot* (an extra sequence id): one slot, like the serial engine's live context, or :data:`PREFIX_SLOTS`
with ``edge.prefix_cache_mb`` on.  The new tokens replace the slot they share the most with (a system
prompt, an earlier turn of the conversation: the newer holds it too), else the least recently used.  A
later prompt that shares at least ``MIN_GAIN_TOKENS`` with a slot gets those cells by
``llama_memory_seq_cp`` (in a unified cache the cells are shared, not copied) and evaluates only the
rest: a shared system prompt is evaluated once.  The context holds ``(max_sequences + slots) ×
per-sequence context`` cells, so no sequence runs out of room: a request's budget is checked against
``edge.sequence_tokens`` (at most ``context_tokens``).

Background requests (``Generation.background``: batch lines) take only what live requests leave: their
prompts go :data:`BACKGROUND_CHUNK` tokens a step (a live request that arrives waits for the step in
progress, never for a whole prompt), and their finished tokens fill a free prefix slot or one that
another background request filled, never a live request's.  The gateway cancels them when a live
request comes (gateway/api/batches/runner.py), and a cancelled sequence leaves before the next step.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tiers._errors import TierError, TierOverloaded, TierRejected, TierUnavailable
from tiers._events import Event
from tiers._slots import SustainedSlots
from tiers._types import Generation, Health, TierState
from tiers.edge._config import EdgeConfig, default_threads
from tiers.edge._decode import Decoder, Emit, Steps, budget_for
from tiers.edge._llamacpp import LlamaCppTier, model_file, vocabulary
from tiers.edge._prefix import SlotTable
from tiers.edge._text import prompt_text

log = logging.getLogger(__name__)

# Prompt tokens a joining request may add to a step in which others decode (all of n_batch when alone).
# On a 2-core AVX2 machine a prompt token costs ~5 ms: 32 of them stretch the others' step ~0.15 s.
PREFILL_CHUNK = 32
# Prompt tokens a background request (a batch line) adds to a step, alone or not: a live request that
# arrives waits for the step in progress, so the step is kept about as short as a decode step (a
# batch line's whole prompt in one step was ~90 ms, against a ~60 ms live answer).
BACKGROUND_CHUNK = 2
# Finished requests' token cells kept for prefix reuse when edge.prefix_cache_mb is not 0 (else one).
PREFIX_SLOTS = 2

__all__ = ["BatchedLlamaTier"]


@dataclass(eq=False, slots=True)
class _Job:
    gen: Generation
    emit: Emit
    cancel: threading.Event


@dataclass(eq=False, slots=True)
class _Seq:
    """One request in the context: its sequence id, the tokens its cells hold, and its decode loop."""

    job: _Job
    seq_id: int
    prompt: list[int]
    budget: int
    decoder: Decoder
    tokens: list[int] = field(default_factory=list)  # what the cells of seq_id hold, in order
    pending: list[int] = field(default_factory=list)  # prompt tokens still to evaluate
    cached: int = 0
    next_token: int | None = None  # to append in the next step
    steps: Steps | None = None


class BatchedLlamaTier(LlamaCppTier):
    """A :class:`~tiers.Tier` over one llama.cpp context decoding up to ``max_sequences`` requests at once."""

    thread_name = "llama-batch"

    def __init__(self, config: EdgeConfig, instance: str = "") -> None:
        super().__init__(config, instance)
        self.max_sequences = config.max_sequences
        self.sequence_tokens = min(config.sequence_tokens or config.context_tokens, config.context_tokens)
        first = self.max_sequences  # prefix slots' sequence ids come after the requests'
        self._kept = SlotTable(range(first, first + (PREFIX_SLOTS if config.prefix_cache_mb else 1)))
        self._ctx: Any = None
        self._model: Any = None
        self._batch: Any = None
        self._vocab_size = 0
        self._guard = threading.Lock()  # the job queue and whether the worker is serving
        self._jobs: collections.deque[_Job] = collections.deque()
        self._serving = False
        self._running: list[_Seq] = []
        self._free = list(range(self.max_sequences))[::-1]  # free sequence ids, the lowest taken first
        self.steps = 0  # llama_decode calls (for the tests and the bench)
        self.sustained = SustainedSlots(self.max_sequences)  # how many to take at once, measured

    @property
    def slots(self) -> int:
        return self.sustained.slots

    @property
    def load(self) -> int:
        return len(self._running) + len(self._jobs)

    def state(self) -> TierState:
        run, jobs, slow = len(self._running), len(self._jobs), self.sustained.joining(self.load)
        # the serial engine's state (health, detail, where it runs, its speed) with the batch's load
        return replace(super().state(), in_flight=run, queued=jobs, slots=self.slots, slowdown=slow)

    def describe(self) -> str:
        return f"{super().describe()}, batches up to {self.max_sequences} sequences of {self.sequence_tokens}"

    # -- loading (on the worker thread) ----------------------------------------

    def _load(self) -> None:
        import llama_cpp
        from llama_cpp import _internals
        from llama_cpp._logger import set_verbose
        from llama_cpp._utils import suppress_stdout_stderr

        set_verbose(False)
        llama_cpp.llama_backend_init()
        path = model_file(self._config)
        params = llama_cpp.llama_model_default_params()
        params.n_gpu_layers = self._place()
        model = _internals.LlamaModel(path_model=str(path), params=params, verbose=False)
        context = llama_cpp.llama_context_default_params()
        context.n_ctx = (self.max_sequences + len(self._kept.ids)) * self.sequence_tokens
        context.n_batch = context.n_ubatch = self._config.batch_tokens
        context.n_seq_max = self.max_sequences + len(self._kept.ids)
        context.kv_unified = True
        context.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED  # as the serial engine (Llama)
        context.n_threads = self._config.threads or default_threads()  # a step of one token
        context.n_threads_batch = self._config.batch_threads or context.n_threads  # of more
        # Silences its n_ctx_seq > n_ctx_train warning: unified, n_ctx is all sequences'.
        with suppress_stdout_stderr():
            self._ctx = _internals.LlamaContext(model=model, params=context, verbose=False)
        self._batch = llama_cpp.llama_batch_init(self._config.batch_tokens, 0, 1)
        self._model = model
        self._vocab_size = int(model.n_vocab())
        bos, eos = (model.token_get_text(t) for t in (model.token_bos(), model.token_eos()))
        self._tokens = {"bos": bos, "eos": eos}
        self._vocab = vocabulary(model)

    def _unload(self) -> None:
        import llama_cpp

        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
        self._batch = self._ctx = self._model = self._vocab = None

    def _generate_into(self, gen: Generation, emit: Emit, cancel: threading.Event) -> None:
        """One request alone, on the worker thread (the warm-up at start)."""
        with self._guard:
            self._jobs.append(_Job(gen, emit, cancel))
            self._serving = True
        self._serve()

    # -- requests (on the event loop) --------------------------------------------

    async def generate(self, gen: Generation) -> AsyncGenerator[Event, None]:
        if self._health is not Health.READY:
            raise TierUnavailable(self.name, self._detail)
        if len(self._jobs) >= self._config.max_queue:
            raise TierOverloaded(self.name, f"{len(self._jobs)} requests are waiting for the edge model")
        queue, emit = self._channel()
        job = _Job(gen, emit, threading.Event())
        with self._guard:
            self._jobs.append(job)
            start, self._serving = not self._serving, True
        if start:
            self._executor.submit(self._serve)
        try:
            async for event in self._relay(queue):
                yield event
        finally:
            job.cancel.set()  # the worker drops its sequence before the next step
            with self._guard:
                if job in self._jobs:
                    self._jobs.remove(job)

    # -- the scheduler (on the worker thread) -------------------------------------

    def _serve(self) -> None:
        """Steps until no request is running or waiting."""
        try:
            while True:
                if self._health is Health.DOWN:  # closing: what is inside ends now, not after its answer
                    self._close_all()
                with self._guard:
                    joining: list[tuple[_Job, int]] = []
                    while self._jobs and self._free and len(self._running) + len(joining) < self.slots:
                        joining.append((self._jobs.popleft(), self._free.pop()))
                    if not joining and not self._running:
                        self._serving = False
                        return
                for job, seq_id in joining:
                    self._join(job, seq_id)
                try:
                    self._step()
                except Exception as exc:  # the context is unusable for this batch: fail what is in it
                    log.exception("edge: batched decode failed")
                    for seq in list(self._running):
                        self._leave(seq, TierUnavailable(self.name, f"generation failed: {exc}"))
        except BaseException:
            with self._guard:  # never left serving with nobody to serve: the next request starts again
                self._serving = False
            raise

    def _close_all(self) -> None:
        closed = TierUnavailable(self.name, "the edge instance is closing")
        for seq in list(self._running):
            self._leave(seq, closed)
        with self._guard:
            jobs, self._jobs = list(self._jobs), collections.deque()
        for job in jobs:
            job.emit(closed)

    def _join(self, job: _Job, seq_id: int) -> None:
        try:
            seq = self._admit(job, seq_id)
        except TierError as exc:
            job.emit(exc)
        except Exception as exc:
            log.exception("edge: preparing a request failed")
            job.emit(TierUnavailable(self.name, f"generation failed: {exc}"))
        else:
            self._running.append(seq)
            return
        with self._guard:
            self._free.append(seq_id)

    def _admit(self, job: _Job, seq_id: int) -> _Seq:
        vocab, gen = self._vocab, job.gen
        if self._model is None or vocab is None:
            raise TierUnavailable(self.name, "model not loaded")
        try:
            text, add_bos = prompt_text(gen, self._tokens["bos"], self._tokens["eos"])
        except ValueError as exc:
            raise TierRejected(self.name, str(exc)) from exc
        prompt = self._model.tokenize(text.encode("utf-8"), add_bos, True)  # a chat's template has it
        budget = budget_for(gen, len(prompt), self.sequence_tokens, self.name)
        seq = _Seq(job, seq_id, prompt, budget, Decoder(self.name, None, vocab, gen))
        self._remove(seq_id)
        reuse = self._reuse_prefix(seq)
        seq.tokens, seq.pending, seq.cached = prompt[:reuse], prompt[reuse:], reuse
        return seq

    def _step(self) -> None:
        """One llama_decode: a token for every decoding sequence, then prompt chunks in the room left."""
        import llama_cpp

        for seq in [s for s in self._running if s.job.cancel.is_set()]:
            self._leave(seq, None)
        batch, rows = self._batch, []
        batch.n_tokens = 0
        for seq in self._running:
            if seq.next_token is not None:
                rows.append((self._add(seq, [seq.next_token], last=True), seq))
                seq.next_token = None
        decoding, started = len(rows), time.perf_counter()
        room = min(self._config.batch_tokens - batch.n_tokens, PREFILL_CHUNK if rows else 1 << 30)
        quiet = BACKGROUND_CHUNK  # of the room, what background prompts may take
        for seq in self._running:
            if room <= 0:
                break
            background = seq.job.gen.background
            size = min(room, quiet) if background else room
            if seq.pending and size > 0:
                chunk, seq.pending = seq.pending[:size], seq.pending[size:]
                room -= len(chunk)
                quiet -= len(chunk) if background else 0
                at = self._add(seq, chunk, last=not seq.pending)
                if not seq.pending:
                    rows.append((at, seq))
        if not batch.n_tokens:
            return
        code = llama_cpp.llama_decode(self._ctx.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode returned {code}")
        self.steps += 1
        for at, seq in rows:
            pointer = llama_cpp.llama_get_logits_ith(self._ctx.ctx, at)
            self._feed(seq, np.ctypeslib.as_array(pointer, shape=(self._vocab_size,)))
        if decoding == batch.n_tokens:  # a pure decode step (with sampling): what a width sustains
            self.sustained.step(decoding, time.perf_counter() - started)

    def _add(self, seq: _Seq, tokens: list[int], *, last: bool) -> int:
        """Append ``tokens`` of ``seq`` to the batch (the logits of the last one wanted when ``last``):
        the batch index of the last one."""
        batch = self._batch
        for token in tokens:
            i = batch.n_tokens
            batch.token[i] = token
            batch.pos[i] = len(seq.tokens)
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq.seq_id
            batch.logits[i] = 0
            seq.tokens.append(token)
            batch.n_tokens = i + 1
        batch.logits[batch.n_tokens - 1] = int(last)
        return int(batch.n_tokens - 1)

    def _feed(self, seq: _Seq, row: Any) -> None:
        """Give ``seq``'s decode loop its next row; it picks the token for the next step, or ends."""
        try:
            if seq.steps is None:  # the prompt's last row: the answers begin
                job = seq.job
                seq.steps = seq.decoder.steps(
                    seq.prompt,
                    row.copy(),
                    seq.cached,
                    seq.budget,
                    job.emit,
                    job.cancel,
                    lambda n: self._rewind(seq, n),
                )
                seq.next_token = next(seq.steps)
            else:
                seq.next_token = seq.steps.send(row)
        except StopIteration as done:
            self._leave(seq, None, finished=bool(done.value))
        except TierError as exc:
            self._leave(seq, exc)
        except Exception as exc:
            log.exception("edge generation failed")
            self._leave(seq, TierUnavailable(self.name, f"generation failed: {exc}"))

    def _rewind(self, seq: _Seq, length: int) -> None:
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(self._ctx.memory, seq.seq_id, length, -1)
        del seq.tokens[length:]

    def _leave(self, seq: _Seq, error: BaseException | None, *, finished: bool = False) -> None:
        """``seq`` is done (finished, failed or cancelled): its cells are freed now (a finished one's
        kept as a prefix slot when worth it), its id is free for the next step."""
        if error is not None:
            seq.job.emit(error)
        if finished:
            self._keep_prefix(seq)
        self._remove(seq.seq_id)
        self._running.remove(seq)
        with self._guard:
            self._free.append(seq.seq_id)

    def _remove(self, seq_id: int) -> None:
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(self._ctx.memory, seq_id, -1, -1)

    # -- prefix slots ----------------------------------------------------------------

    def _reuse_prefix(self, seq: _Seq) -> int:
        """Share the cells of the slot that has the most of ``seq``'s prompt: how many tokens it has."""
        import llama_cpp

        found, shared = self._kept.best(seq.prompt)
        if found is None:
            return 0
        llama_cpp.llama_memory_seq_cp(self._ctx.memory, found, seq.seq_id, 0, shared)
        self.prefixes.hits += 1
        return shared

    def _forget_prefixes(self) -> None:
        """Empty the cache (nothing running): no slot kept, the cells placed from the first again."""
        import llama_cpp

        assert not self._running
        llama_cpp.llama_memory_clear(self._ctx.memory, True)
        self._kept.clear()

    def _keep_prefix(self, seq: _Seq) -> None:
        import llama_cpp

        slot = self._kept.place(seq.tokens, seq.job.gen.background)
        if slot is not None:
            self._remove(slot)
            llama_cpp.llama_memory_seq_cp(self._ctx.memory, seq.seq_id, slot, 0, len(seq.tokens))
