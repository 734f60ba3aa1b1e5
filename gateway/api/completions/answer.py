"""A legacy completions request's answers (one per prompt) framed as OpenAI's ``text_completion``:
one JSON body, or chunks of the same shape then ``data: [DONE]``.

Prompt ``i``'s choice ``j`` is choice ``i * n + j``.  ``echo`` puts the prompt before each choice's
text (a streamed choice's first chunk).  Logprobs are the completions format: ``tokens``,
``token_logprobs``, ``top_logprobs`` (a map of each token's alternatives) and ``text_offset`` (where
each token starts in the choice's text, counted over the tokens so far).  Streamed chunks carry
``finish_reason: null`` until their choice ends, as OpenAI's API sends them (its published schema says
a string).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

import msgspec

from gateway.api.framing import fingerprint
from gateway.api.sse import DONE, frame
from gateway.errors import error_body, to_gateway_error
from gateway.pipeline.answer import Answer
from gateway.wire.chat import encode
from gateway.wire.chat_response import TiergateInfo, UsageBody, usage_body
from tiers import ChoiceDone, Finished, Logprobs, TextDelta, TokenLogprob, Usage, collect

UNSET = msgspec.UNSET


class CompletionLogprobs(msgspec.Struct):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class CompletionChoice(msgspec.Struct):
    text: str
    index: int
    logprobs: CompletionLogprobs | None
    finish_reason: str | None


class TextCompletion(msgspec.Struct):
    id: str
    created: int
    model: str
    choices: list[CompletionChoice]
    object: str = "text_completion"
    system_fingerprint: str | None = None
    usage: UsageBody | msgspec.UnsetType = UNSET
    tiergate: TiergateInfo | msgspec.UnsetType = UNSET


def completion_id(request_id: str) -> str:
    return f"cmpl-{request_id}"


def _info(answers: Sequence[Answer]) -> TiergateInfo | msgspec.UnsetType:
    degraded = sorted({d for a in answers for d in a.routed.degraded})
    return TiergateInfo(degraded=degraded) if degraded else UNSET


def _total(usages: Sequence[Usage]) -> Usage:
    return Usage(
        sum(u.prompt_tokens for u in usages),
        sum(u.completion_tokens for u in usages),
        sum(u.cached_tokens for u in usages),
    )


class _Offsets:
    """Each choice's tokens so far, for ``text_offset``."""

    def __init__(self) -> None:
        self._at: dict[int, int] = {}

    def body(self, choice: int, tokens: list[TokenLogprob] | None) -> CompletionLogprobs | None:
        if tokens is None:
            return None
        at = self._at.get(choice, 0)
        offsets = []
        for t in tokens:
            offsets.append(at)
            at += len(t.token)
        self._at[choice] = at
        return CompletionLogprobs(
            [t.token for t in tokens],
            [t.logprob for t in tokens],
            [{a.token: a.logprob for a in t.top} for t in tokens],
            offsets,
        )


def _reason(reason: str) -> str:
    """OpenAI's legacy reasons are stop, length and content_filter; tools are not part of it."""
    return reason if reason in ("stop", "length", "content_filter") else "stop"


async def json_body(answers: Sequence[Answer], prompts: Sequence[str], n: int, echo: bool, rid: str) -> bytes:
    """Every prompt's answer, read whole, as one ``text_completion``."""
    choices: list[CompletionChoice] = []
    usages = []
    for i, answer in enumerate(answers):
        result = await collect(answer.events)
        usages.append(result.usage)
        offsets = _Offsets()
        for c in result.choices:
            text = prompts[i] + c.text if echo else c.text
            choices.append(
                CompletionChoice(
                    text, i * n + c.index, offsets.body(c.index, c.logprobs), _reason(c.finish_reason)
                )
            )
    first = answers[0]
    return encode(
        TextCompletion(
            completion_id(rid),
            int(time.time()),
            first.model,
            choices,
            system_fingerprint=fingerprint(first),
            usage=usage_body(_total(usages)),
            tiergate=_info(answers),
        )
    )


class _Chunks:
    def __init__(self, first: Answer, rid: str) -> None:
        self._id = completion_id(rid)
        self._created = int(time.time())
        self._model = first.model
        self._fingerprint = fingerprint(first)

    def chunk(
        self,
        choices: list[CompletionChoice],
        usage: UsageBody | msgspec.UnsetType = UNSET,
        info: TiergateInfo | msgspec.UnsetType = UNSET,
    ) -> bytes:
        body = TextCompletion(
            self._id,
            self._created,
            self._model,
            choices,
            system_fingerprint=self._fingerprint,
            usage=usage,
            tiergate=info,
        )
        return frame(encode(body))


async def event_stream(
    first: Answer,
    later: Sequence[Callable[[], Awaitable[Answer]]],
    prompts: Sequence[str],
    n: int,
    *,
    echo: bool,
    include_usage: bool,
    rid: str,
) -> AsyncGenerator[bytes, None]:
    """The prompts' answers one after another as ``text_completion`` chunks (``first`` has begun;
    each of ``later`` begins the next prompt's), then the usage chunk (when asked for) and
    ``data: [DONE]``. However it ends, the answer being read is closed (and with it the tier's
    generation). A failure mid-stream, a later prompt's included, is sent as an OpenAI-shaped error
    event."""
    chunks = _Chunks(first, rid)
    usages: list[Usage] = []
    seen: list[Answer] = []
    answer = first
    try:
        for i in range(len(prompts)):
            if i:
                answer = await later[i - 1]()
            seen.append(answer)
            base = i * n
            echoed = b""
            if echo:
                echoed = b"".join(
                    chunks.chunk([CompletionChoice(prompts[i], base + j, None, None)]) for j in range(n)
                )
            info = _info(seen) if i == len(prompts) - 1 else UNSET
            async for out in _answer_chunks(chunks, answer, base, n, usages, info, echoed):
                yield out
            await answer.events.aclose()
    except Exception as exc:  # a tier failed mid-stream: the status cannot change any more
        yield frame(msgspec.json.encode(error_body(to_gateway_error(exc))))
        return
    finally:
        await answer.events.aclose()
    if include_usage:
        yield chunks.chunk([], usage=usage_body(_total(usages)))
    yield DONE


async def _answer_chunks(
    chunks: _Chunks,
    answer: Answer,
    base: int,
    n: int,
    usages: list[Usage],
    info: TiergateInfo | msgspec.UnsetType,
    echoed: bytes,
) -> AsyncGenerator[bytes, None]:
    """One prompt's answer: ``echoed`` (its choices' echoed prompt) once the first event is read (an
    answer's events, once begun, are closed properly), its choices' text (with the logprobs read
    before it), then each choice's finishing chunk; ``info`` rides on the very last one."""
    offsets = _Offsets()
    scores: dict[int, list[TokenLogprob]] = {}
    open_choices = set(range(n))

    def end(choice: int, reason: str, info: TiergateInfo | msgspec.UnsetType = UNSET) -> bytes:
        open_choices.discard(choice)
        body = offsets.body(choice, scores.pop(choice, None))
        return chunks.chunk([CompletionChoice("", base + choice, body, _reason(reason))], info=info)

    async for event in answer.events:
        if echoed:
            yield echoed
            echoed = b""
        if isinstance(event, TextDelta) and event.text:
            body = offsets.body(event.choice, scores.pop(event.choice, None))
            yield chunks.chunk([CompletionChoice(event.text, base + event.choice, body, None)])
        elif isinstance(event, Logprobs):
            scores.setdefault(event.choice, []).extend(event.tokens)
        elif isinstance(event, ChoiceDone):
            yield end(event.choice, event.reason, info if open_choices == {event.choice} else UNSET)
        elif isinstance(event, Finished):
            usages.append(event.usage)
            if remaining := sorted(open_choices):
                yield b"".join(end(c, event.reason, info if c == remaining[-1] else UNSET) for c in remaining)
            return
    if remaining := sorted(open_choices):  # the events ended without Finished: stopped, nothing counted
        yield echoed + b"".join(end(c, "stop", info if c == remaining[-1] else UNSET) for c in remaining)
