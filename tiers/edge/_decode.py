"""The edge's one decode loop, for every in-process engine: logits rows in, events out.

An engine (:class:`Engine`: llama.cpp's context, ONNX Runtime's session) evaluates the prompt, reusing
what its context or saved states already hold, and one token at a time after it, each time giving back
the logits row of the next position.  The loop does the rest, the same for both engines:

* shapes the row and picks a token (:class:`~tiers.edge._sampling.Sampler`: ``logit_bias``, the
  penalties, the end of text banned before ``min_tokens`` or with ``ignore_eos``, the grammar's mask);
* constrains the answer with llguidance when the request has tools or a JSON ``response_format``
  (:mod:`tiers.edge._grammar`): an ``LLMatcher`` per answer fills a token bitmask before each pick and
  consumes the token after it; the answer ends when the grammar is complete; in its last
  :data:`WRAP_UP` tokens, tokens that close what is open, or end a value, are taken where the grammar
  allows any (:func:`wrapped_up`), so the answer finishes within ``max_tokens`` (the schema's own
  unbounded parts are bounded before it is compiled: :func:`tiers.edge._grammar.bounded`);
* reports log-probabilities from the engine's raw row (before any shaping), with ``top_logprobs``
  alternatives;
* ends an answer at an end-of-generation token, a ``stop_token_ids`` token, a stop string
  (:class:`~tiers.edge._text.StopScanner`) or ``max_tokens``;
* turns the text into events (:mod:`tiers.edge._toolcalls`: text, or tool calls when tools are in play);
* makes ``n`` answers one after another from the same evaluated prompt (the engine rewinds to it; its
  last row is kept), seeded ``seed + i``, each choice's events tagged with its index and closed with a
  :class:`ChoiceDone`.  Usage counts the prompt once and every choice's tokens.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tiers._errors import TierFailed, TierRejected, too_long
from tiers._events import ChoiceDone, Event, Finished, Logprobs, TokenLogprob, TopLogprob
from tiers._types import Generation, Usage
from tiers.edge._grammar import GrammarError, grammar_of, parser_limits
from tiers.edge._sampling import Row, Sampler, TokenText, allowed_tokens, logprobs_of
from tiers.edge._text import StopScanner
from tiers.edge._toolcalls import PlainText, ToolCallText

log = logging.getLogger(__name__)

# SmolLM2's model card recommends a low temperature; used when the client sets none.
DEFAULT_TEMPERATURE = 0.2
DEFAULT_TOP_P = 0.9

Emit = Callable[[Event | BaseException], None]
# A request's decoding as a state machine (:meth:`Decoder.steps`): it yields the token to append, is sent
# the logits row after it, and returns whether it finished (False: cancelled).
Steps = Generator[int, Row, bool]


class Engine(Protocol):
    """What the loop needs of an engine; called on its worker thread only."""

    def prefill(self, prompt: list[int]) -> tuple[Row, int]:
        """Evaluate ``prompt`` (only what the context does not hold already): the logits row after it
        (a copy the engine will not change) and how many prompt tokens were reused."""
        ...

    def advance(self, token: int) -> Row:
        """Append ``token``: the next logits row (valid until the next call)."""
        ...

    def rewind(self, length: int) -> None:
        """Forget every token after the first ``length`` (back to the prompt, for another answer)."""
        ...


# A constrained answer this close to its token budget is wrapped up, so the JSON or the tool call
# finishes within max_tokens instead of being cut off: a small model at temperature 0.8 otherwise fills
# a number with digits, or a string with emoji (four tokens each) or with ``]}]}``, while required keys
# wait.  Of the tokens its grammar allows, the wrap-up takes the first kind there is of: those that end
# the answer or hold a quote (inside a string only a quote closes it: ``}`` and ``]`` there are more of
# the string); those that close what is open (``}``, ``]``); those that end a value and go on to the
# next (``,``, ``:``: a number stops growing there, and a required key still to come is reached); then
# anything but more of a number or blank space.  Each wrap-up token thus moves toward the end.
WRAP_UP = 32
Mask = np.ndarray[Any, np.dtype[np.bool_]]  # one flag per token
_CLOSING = frozenset(b'"}] ')
_SEPARATING = frozenset(b'"}], :')
_GROWING = frozenset(b"0123456789.eE+- \t\n\r")


def _closes(piece: bytes) -> bool:
    return piece.strip() != b"" and set(piece) <= _CLOSING


def _separates(piece: bytes) -> bool:
    return set(piece) <= _SEPARATING and (b"," in piece or b":" in piece)


def _grows(piece: bytes) -> bool:
    return set(piece) <= _GROWING  # digits, a decimal point, an exponent, blank space (b"" included)


@dataclass(frozen=True)
class Vocabulary:
    """What the loop needs of a model's tokenizer, built once when the model loads."""

    pieces: list[bytes]  # each token's bytes in the answer's text (b"" for special tokens)
    shown: list[bytes]  # each token as log-probabilities name it (special tokens by their text)
    end: frozenset[int]  # end-of-generation tokens
    guide: Any = None  # llguidance's LLTokenizer, None without llguidance

    def __post_init__(self) -> None:
        if self.guide is not None:  # made with the model (~0.1 s), not in a request's last tokens
            _ = self.wrap_up

    @functools.cached_property
    def wrap_up(self) -> tuple[Mask, ...]:
        """The kinds of token a wrap-up prefers, first to last (see :data:`WRAP_UP`), one flag per token."""
        closers = np.array([_closes(p) for p in self.pieces], dtype=np.bool_)
        quoted = closers & np.array([b'"' in p for p in self.pieces], dtype=np.bool_)
        quoted[list(self.end)] = True
        separators = np.array([_separates(p) for p in self.pieces], dtype=np.bool_)
        others = ~np.array([_grows(p) for p in self.pieces], dtype=np.bool_)
        return quoted, closers, separators, others


def wrapped_up(allowed: Mask, vocab: Vocabulary) -> Mask:
    """Of the ``allowed`` tokens, the first kind a wrap-up prefers that has any; else ``allowed``."""
    size = allowed.shape[0]
    for kind in vocab.wrap_up:
        chosen = allowed & kind[:size]
        if chosen.any():
            return chosen
    return allowed


@dataclass(slots=True)
class _Choice:
    reason: str
    tokens: int
    stop: str = ""  # the stop sequence that ended it


class Decoder:
    """One request's decoding: compile its grammar, then run its answers on ``engine`` (:meth:`run`), or
    step by step where an engine batches several sequences (:meth:`steps`, no ``engine`` needed)."""

    def __init__(self, tier: str, engine: Engine | None, vocab: Vocabulary, gen: Generation) -> None:
        self._tier = tier
        self._engine = engine
        self._vocab = vocab
        self._gen = gen
        self._matcher = self._compile()  # before anything runs: a bad grammar costs no prefill

    def _compile(self) -> Any:
        try:
            grammar = grammar_of(self._gen)
        except GrammarError as exc:
            raise TierRejected(self._tier, str(exc)) from exc
        if grammar is None:
            return None
        if self._vocab.guide is None:
            raise TierRejected(self._tier, "tools and response_format need llguidance (not installed)")
        from llguidance import LLMatcher

        matcher = LLMatcher(self._vocab.guide, grammar, limits=parser_limits(), log_level=0)
        if matcher.is_error():
            raise TierRejected(self._tier, f"the schema or tools cannot be used: {matcher.get_error()}")
        return matcher

    def run(self, prompt: list[int], budget: int, emit: Emit, cancel: threading.Event) -> bool:
        """Every answer on this decoder's engine, one sequence alone, then :class:`Finished`; False
        when cancelled first."""
        engine = self._engine
        assert engine is not None, "a decoder without an engine is driven by steps()"
        first, cached = engine.prefill(prompt)
        steps = self.steps(prompt, first, cached, budget, emit, cancel, engine.rewind)
        try:
            token = next(steps)
            while True:
                token = steps.send(engine.advance(token))
        except StopIteration as done:
            return bool(done.value)

    def steps(
        self,
        prompt: list[int],
        first: Row,
        cached: int,
        budget: int,
        emit: Emit,
        cancel: threading.Event,
        rewind: Callable[[int], None],
    ) -> Steps:
        """Every answer after an evaluated prompt (``first``: its last row), driven one token at a time
        (see :data:`Steps`): a batching engine drives many of these, one step each per ``llama_decode``.
        ``rewind`` forgets the answer's tokens before the next of ``n`` answers."""
        gen = self._gen
        seed = gen.seed if gen.seed is not None else random.getrandbits(32)
        made = 0
        reason, stop = "stop", ""
        for i in range(max(1, gen.n)):
            if i:
                rewind(len(prompt))
            choice = yield from self._answer(i, prompt, first, seed + i, budget, emit, cancel)
            if choice is None:
                return False
            made += choice.tokens
            reason, stop = choice.reason, choice.stop
            if gen.n > 1:
                emit(ChoiceDone(i, reason))
        emit(Finished(reason, Usage(len(prompt), made, cached), stop))
        return True

    def _sampler(self, seed: int, prompt: list[int]) -> Sampler:
        gen = self._gen
        return Sampler(
            temperature=DEFAULT_TEMPERATURE if gen.temperature is None else gen.temperature,
            top_p=DEFAULT_TOP_P if gen.top_p is None else gen.top_p,
            seed=seed,
            presence_penalty=gen.presence_penalty or 0.0,
            frequency_penalty=gen.frequency_penalty or 0.0,
            top_k=gen.top_k,
            min_p=gen.min_p,
            repetition_penalty=gen.repetition_penalty,
            logit_bias=gen.logit_bias,
            prompt=prompt,
        )

    def _answer(
        self,
        choice: int,
        prompt: list[int],
        first: Row,
        seed: int,
        budget: int,
        emit: Emit,
        cancel: threading.Event,
    ) -> Generator[int, Row, _Choice | None]:
        gen, vocab = self._gen, self._vocab
        sampler = self._sampler(seed, prompt)
        guide = None if self._matcher is None else _Guide(self._matcher.deep_copy(), vocab.guide.vocab_size)
        output = ToolCallText(choice, self._tier) if gen.tool_mode != "none" else PlainText(choice)
        text = TokenText(vocab.pieces)
        scanner = StopScanner(gen.stop)
        stop_ids = frozenset(gen.stop_token_ids)
        ends = vocab.end | stop_ids
        banned_always = vocab.end if gen.ignore_eos else frozenset()
        banned_early = ends if gen.min_tokens else banned_always
        top = gen.top_logprobs if gen.logprobs else -1
        row = first
        produced = 0
        reason = "length"
        while produced < budget:
            if cancel.is_set():
                return None
            allowed = None if guide is None else guide.allowed(row.shape[0])
            if allowed is not None and budget - produced <= min(WRAP_UP, budget // 4):
                allowed = wrapped_up(allowed, vocab)
            banned = banned_early if produced < gen.min_tokens else banned_always
            # the row may be shaped in place unless it is the prompt's (kept for the next answer) or its
            # raw values are still needed for the log-probabilities
            token = sampler.pick(row, banned=banned, allowed=allowed, owned=top < 0 and row is not first)
            if token in ends:  # not part of the answer: no text, no logprobs, not counted
                reason = "stop"
                break
            if top >= 0:
                emit(Logprobs([self._logprob(row, token, top)], choice))
            if guide is not None:
                guide.consume(token, self._tier)
            produced += 1
            ready, stopped = scanner.feed(text.feed(token))
            for event in output.feed(ready):
                emit(event)
            if stopped or (guide is not None and guide.matcher.is_stopped()):
                reason = "stop"
                break
            if produced < budget:
                row = yield token
        if not scanner.stopped:
            for event in output.feed(scanner.flush(text.flush())):
                emit(event)
        for event in output.finish():
            emit(event)
        if output.open_call:
            log.info("edge: answer %s ended inside a tool call (max_tokens): finish_reason length", choice)
            reason = "length"
        elif output.calls:
            reason = "tool_calls"
        return _Choice(reason, produced, scanner.matched if reason == "stop" else "")

    def _logprob(self, row: Row, token: int, top: int) -> TokenLogprob:
        logprob, alternatives = logprobs_of(row, token, top)
        shown = self._vocab.shown
        return TokenLogprob(
            _as_text(shown[token]),
            logprob,
            list(shown[token]),
            [TopLogprob(_as_text(shown[t]), lp, list(shown[t])) for t, lp in alternatives],
        )


class _Guide:
    """An answer's grammar state: the mask of the tokens it allows next, and the tokens it took."""

    def __init__(self, matcher: Any, vocab_size: int) -> None:
        from llguidance.numpy import allocate_token_bitmask, fill_next_token_bitmask

        self.matcher = matcher
        self._bitmask = allocate_token_bitmask(1, vocab_size)
        self._fill = fill_next_token_bitmask

    def allowed(self, size: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
        self._fill(self.matcher, self._bitmask)
        return allowed_tokens(self._bitmask, size)

    def consume(self, token: int, tier: str) -> None:
        if not self.matcher.consume_token(token):
            raise TierFailed(tier, f"the grammar refused its own token: {self.matcher.get_error()}")


def budget_for(gen: Generation, prompt_tokens: int, context: int, tier: str) -> int:
    """How many tokens an answer may have; raises :class:`TierRejected` when the prompt and
    ``max_tokens`` do not fit in the context."""
    room = context - prompt_tokens
    if room <= 0 or (gen.max_tokens is not None and gen.max_tokens > room):
        raise too_long(tier, prompt_tokens, gen.max_tokens, context)  # context_length_exceeded
    return min(gen.max_tokens or room, room)


def _as_text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def special_free(pieces: list[bytes], special: np.ndarray[Any, np.dtype[np.bool_]]) -> list[bytes]:
    """``pieces`` with special tokens' text blanked (they are not part of an answer's text)."""
    return [b"" if s else p for p, s in zip(pieces, special.tolist(), strict=True)]
