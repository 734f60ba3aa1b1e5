"""The token that ended an answer (the model's end of turn, SmolLM2's ``<|im_end|>``) is not part of it.

vLLM counts that token in ``usage.completion_tokens`` and, with logprobs, scores it as the answer's last
token, though no text of it is in the answer.  OpenAI's API does neither (an answer's logprobs spell its
content, one entry per completion token) and neither does the edge tier, so the pool drops it from both:
the same request gets the same counts on every tier, and the same bill.  vLLM says an answer ended at
that token by ``finish_reason`` "stop" (or "tool_calls") with ``stop_reason`` null; a stop string or
stop token id that ended it is named there instead, and its token stays, as on the edge.  A server that
sends no ``stop_reason`` at all is taken at its word.
"""

from __future__ import annotations

import msgspec

from tiers._types import Usage
from tiers.cloud._shapes import WireChoice, WireChunkChoice, WireLogprobs, WireMessage


def scored(choice: WireChoice | WireChunkChoice, said: WireMessage | None) -> tuple[WireLogprobs | None, int]:
    """A choice's logprobs (its ``message`` or ``delta`` is ``said``), less the end token's entry when
    vLLM says the choice ended at it (``stop_reason`` sent, and null); and 1 when it did, else 0."""
    if choice.finish_reason not in ("stop", "tool_calls") or choice.stop_reason is not None:
        return choice.logprobs, 0
    return without_eos(choice.logprobs, choice.text or (said.content if said else None)), 1


def without_eos(logprobs: WireLogprobs | None, text: str | None) -> WireLogprobs | None:
    """``logprobs`` (chat's ``content`` or completions' ``tokens`` lists) less the last entry, the end
    token, unless its text is where ``text`` (the answer, or the last chunk's piece of it) ends: a server
    that writes special tokens into the text (``skip_special_tokens`` off) keeps it."""
    if logprobs is None:
        return None
    if logprobs.content:
        if (text or "").endswith(logprobs.content[-1].token):
            return logprobs
        return msgspec.structs.replace(logprobs, content=logprobs.content[:-1])
    if not logprobs.tokens or (text or "").endswith(logprobs.tokens[-1]):
        return logprobs
    scores, tops = logprobs.token_logprobs, logprobs.top_logprobs
    return msgspec.structs.replace(
        logprobs,
        tokens=logprobs.tokens[:-1],
        token_logprobs=None if scores is None else scores[:-1],
        top_logprobs=None if tops is None else tops[:-1],
    )


def counted(usage: Usage, ended: int) -> Usage:
    """``usage`` less the end tokens of the ``ended`` choices that ended at one."""
    return Usage(usage.prompt_tokens, max(0, usage.completion_tokens - ended), usage.cached_tokens)
