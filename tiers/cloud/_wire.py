"""The parts of vLLM's OpenAI responses the pool reads, decoded with msgspec, and its answers (one JSON
body, or a stream of chunks) read as the tier's events: text, tool calls (vLLM's ids renamed to OpenAI's
``call_…``), logprobs, and every choice of an ``n`` > 1 answer.  What vLLM says it produced is checked
against what the request asked for (:class:`~tiers.cloud._checks.OutputCheck`) before it is passed on.

A legacy completion (``Generation.prompt``) goes to vLLM's ``/v1/completions`` with its prompt as it is
(no chat template); its choices' ``text`` and completions-format logprobs (``tokens``,
``token_logprobs``, ``top_logprobs``) are read as the same events."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import msgspec

from tiers._errors import TierFailed
from tiers._events import (
    ChoiceDone,
    Event,
    Finished,
    Logprobs,
    Started,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
)
from tiers._types import Generation, Usage
from tiers.cloud._checks import OutputCheck, greedy_copies
from tiers.cloud._eos import counted, scored
from tiers.cloud._shapes import (
    WireChunk,
    WireCompletion,
    WireError,
    WireFunction,
    WireLogprobs,
    WireMessage,
    WireModelList,
    WireUsage,
)

# Generation fields sent to vLLM as they are when set (None: vLLM's default).
_PASSED = (
    "max_tokens",
    "temperature",
    "top_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "top_k",
    "min_p",
    "repetition_penalty",
    "reasoning_effort",
)
_encoder = msgspec.json.Encoder()
completion_decoder = msgspec.json.Decoder(WireCompletion)
chunk_decoder = msgspec.json.Decoder(WireChunk)
error_decoder = msgspec.json.Decoder(WireError)
models_decoder = msgspec.json.Decoder(WireModelList)

_VLLM_TOOL_ID = "chatcmpl-tool-"
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


def path_of(gen: Generation) -> str:
    """vLLM's endpoint for ``gen``: a legacy completion's raw prompt goes to /v1/completions."""
    return CHAT_PATH if gen.prompt is None else COMPLETIONS_PATH


def request_body(gen: Generation, model: str) -> bytes:
    """The request as vLLM's OpenAI server takes it: every field the client set, passed through."""
    body: dict[str, Any] = {"model": model, "stream": gen.stream}
    if gen.prompt is None:
        body["messages"] = gen.messages
    else:
        body["prompt"] = gen.prompt  # as it is: vLLM adds what the tokenizer adds (no chat template)
    if gen.stream:
        body["stream_options"] = {"include_usage": True}
    for key in _PASSED:
        value = getattr(gen, key)
        if value is not None:
            body[key] = value
    if gen.stop:
        body["stop"] = gen.stop
    if gen.tools:
        # Decoded under each function's schema whatever the client's `strict` says: vLLM constrains
        # arguments only for strict tools, and the gateway refuses calls that break the schema.
        body["tools"] = [{**t, "function": {**t["function"], "strict": True}} for t in gen.tools]
        if gen.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = gen.parallel_tool_calls
        if gen.tool_choice is not None:
            body["tool_choice"] = gen.tool_choice
    if gen.response_format is not None:
        body["response_format"] = _strict(gen.response_format)
    if gen.logprobs and gen.prompt is not None:
        body["logprobs"] = gen.top_logprobs  # /v1/completions: the number of alternatives
    elif gen.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = gen.top_logprobs
    if gen.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in gen.logit_bias.items()}
    if gen.n > 1 and greedy_copies(gen) == 1:
        body["n"] = gen.n
    if gen.min_tokens:
        body["min_tokens"] = gen.min_tokens
    if gen.ignore_eos:
        body["ignore_eos"] = True
    if gen.stop_token_ids:
        body["stop_token_ids"] = gen.stop_token_ids
    return _encoder.encode(body)


def _copies(piece: Event, n: int) -> list[Event]:
    """``piece`` (of choice 0) for every choice of a greedy n-choice answer; call ids stay unique."""
    out = [piece]
    for i in range(1, n):
        if isinstance(piece, ToolCallDelta) and piece.id:
            out.append(msgspec.structs.replace(piece, choice=i, id=f"{piece.id}{i}"))
        else:
            out.append(msgspec.structs.replace(piece, choice=i))
    return out


def _strict(response_format: dict[str, Any]) -> dict[str, Any]:
    """A json_schema format asks for strict decoding (the gateway checks the content either way)."""
    spec = response_format.get("json_schema")
    return {**response_format, "json_schema": {**spec, "strict": True}} if spec else response_format


def error_message(body: bytes) -> str:
    """The message of an OpenAI-shaped error body, or the body itself."""
    try:
        err = error_decoder.decode(body)
    except msgspec.DecodeError:
        return body[:300].decode("utf-8", "replace")
    if err.error is not None and err.error.message:
        return err.error.message
    return err.message or body[:300].decode("utf-8", "replace")


def _call_id(wire_id: str | None) -> str:
    """OpenAI's ``call_…`` form of vLLM's ``chatcmpl-tool-…`` id."""
    if not wire_id:
        return ""
    return "call_" + wire_id.removeprefix(_VLLM_TOOL_ID) if wire_id.startswith(_VLLM_TOOL_ID) else wire_id


def _logprobs(wire: WireLogprobs | None, choice: int) -> Logprobs | None:
    if wire is not None and wire.tokens:
        return _completion_logprobs(wire, wire.tokens, choice)
    if wire is None or not wire.content:
        return None
    tokens = [
        TokenLogprob(
            t.token, t.logprob, t.bytes, [TopLogprob(a.token, a.logprob, a.bytes) for a in t.top_logprobs]
        )
        for t in wire.content
    ]
    return Logprobs(tokens, choice)


def _completion_logprobs(wire: WireLogprobs, tokens: list[str], choice: int) -> Logprobs:
    """/v1/completions' logprobs: a token without a logprob (none is, past the prompt) counts as -9999,
    vLLM's own floor."""
    scores = wire.token_logprobs or []
    tops = wire.top_logprobs or []
    out = []
    for i, token in enumerate(tokens):
        score = scores[i] if i < len(scores) else None
        top = tops[i] if i < len(tops) else None
        alternatives = [TopLogprob(t, lp) for t, lp in (top or {}).items()]
        out.append(TokenLogprob(token, -9999.0 if score is None else score, None, alternatives))
    return Logprobs(out, choice)


def _pieces(
    choice: int, message: WireMessage | None, logprobs: WireLogprobs | None, text: str | None = None
) -> list[Event]:
    """The events of one choice's message or delta (or a completion's ``text``): its logprobs, text and
    tool-call pieces."""
    out: list[Event] = []
    if scored := _logprobs(logprobs, choice):
        out.append(scored)
    if text:
        out.append(TextDelta(text, choice))
    if message is None:
        return out
    if message.content:
        out.append(TextDelta(message.content, choice))
    for call in message.tool_calls or ():
        function = call.function or WireFunction()
        out.append(
            ToolCallDelta(
                call.index, _call_id(call.id), function.name or "", function.arguments or "", choice
            )
        )
    return out


def stop_string(stop_reason: int | str | msgspec.UnsetType | None) -> str:
    """vLLM's ``stop_reason`` when a stop string ended the choice (a token id or null: none did)."""
    return stop_reason if isinstance(stop_reason, str) else ""


def _ending(reasons: dict[int, str], n: int, called: set[int]) -> tuple[list[Event], str]:
    """ChoiceDone for every choice but the first of an n > 1 answer, and the first one's reason; a
    choice that called tools ends with ``tool_calls`` (vLLM says ``stop`` for a named tool_choice)."""
    for i in called:
        if reasons.get(i, "stop") == "stop":
            reasons[i] = "tool_calls"
    done: list[Event] = [ChoiceDone(i, reasons.get(i, "stop")) for i in range(1, n)] if n > 1 else []
    return done, reasons.get(0, "stop")


def body_events(body: bytes, instance: str, model: str, check: OutputCheck) -> tuple[Event, ...]:
    """A chat completion's JSON body as events: :class:`Started`, each choice's pieces,
    :class:`Finished`. Raises :class:`msgspec.DecodeError` for a body that is not one, and
    :class:`~tiers.TierFailed` (through ``check``) for output that breaks the request's schemas."""
    answer = completion_decoder.decode(body)
    if not answer.choices:
        raise TierFailed(check.tier, f"{instance} answered 200 without any choice")
    events: list[Event] = [Started(instance, answer.model or model)]
    reasons: dict[int, str] = {}
    stop = ""  # the stop string that ended the answer (vLLM's stop_reason)
    called: set[int] = set()
    ended = 0  # choices that ended at the end token (_eos.py)
    for choice in answer.choices:
        if choice.message is not None and choice.message.tool_calls:
            called.update(range(check.copies) if check.copies > 1 else (choice.index,))
        logprobs, eos = scored(choice, choice.message)
        ended += eos
        pieces = [
            c
            for p in _pieces(choice.index, choice.message, logprobs, choice.text)
            for c in _copies(p, check.copies)
        ]
        check.whole(pieces)
        events.extend(pieces)
        reasons[choice.index] = choice.finish_reason or "stop"
        stop = stop or stop_string(choice.stop_reason)
    for i in range(1, check.copies):
        reasons[i] = reasons[0]
    check.finished(reasons)
    done, reason = _ending(reasons, check.n, called)
    usage = answer.usage or WireUsage()
    return (*events, *done, Finished(reason, counted(usage.usage(), ended), stop if reason == "stop" else ""))


async def stream_events(
    chunks: AsyncIterator[bytes], instance: str, model: str, check: OutputCheck
) -> AsyncGenerator[Event, None]:
    """A streamed chat completion (``stream_options.include_usage``), as the body's bytes arrive, as
    events: :class:`Started` with the first piece (or at the end, for an answer without any), the
    pieces, then :class:`Finished` once ``data: [DONE]`` came (or the body ended), with the usage
    chunk's counts. Raises what reading raises, :class:`msgspec.DecodeError` for a chunk that is not
    one, and :class:`~tiers.TierFailed` at the end when the output breaks the request's schemas."""
    reasons: dict[int, str] = {}
    called: set[int] = set()
    usage: WireUsage | None = None
    ended = 0  # choices that ended at the end token (_eos.py)
    stop = ""  # the stop string that ended the answer (vLLM's stop_reason)
    answering = ""  # the model the chunks name
    started = False
    rest = b""
    reading = True
    source = aiter(chunks)
    while reading:
        try:
            *lines, rest = (rest + await anext(source)).split(b"\n")
        except StopAsyncIteration:
            lines, reading = [rest], False  # a last line without its newline
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                reading = False
                break
            chunk = chunk_decoder.decode(payload)
            if chunk.error is not None:  # the engine failed mid-answer: not an answer that ended
                raise TierFailed(check.tier, f"{instance} failed mid-answer: {chunk.error.message[:300]}")
            answering = answering or chunk.model
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.finish_reason:
                    reasons.update(dict.fromkeys(range(check.copies), choice.finish_reason))
                    reasons[choice.index] = choice.finish_reason
                    stop = stop or stop_string(choice.stop_reason)
                if choice.delta is not None and choice.delta.tool_calls:
                    called.update(range(check.copies) if check.copies > 1 else (choice.index,))
                logprobs, eos = scored(choice, choice.delta)
                ended += eos
                for piece in _pieces(choice.index, choice.delta, logprobs, choice.text):
                    if not started:
                        started = True
                        yield Started(instance, answering or model)
                    for copy in _copies(piece, check.copies):
                        check.piece(copy)
                        yield copy
    if not started:
        yield Started(instance, answering or model)
    check.finished(reasons)
    done, reason = _ending(reasons, check.n, called)
    for event in done:
        yield event
    counts = counted(usage.usage(), ended) if usage else Usage(0, 0)
    yield Finished(reason, counts, stop if reason == "stop" else "")
