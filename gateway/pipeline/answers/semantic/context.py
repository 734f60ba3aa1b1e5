"""Which requests the semantic cache may answer, and what of them must match exactly.

A request is split in two: its last user turn's text, which is embedded and compared by meaning, and
its context, everything else, which must be the same to the byte: the model route and the sampling
parameters, tools, tool choice and response format, the system prompt and every earlier turn, and
the hashes of any media (the last turn's too).  The context is hashed with the exact cache's own key
function (gateway/pipeline/answers/exact.py), so it includes the routing rule and the served models.
"""

from __future__ import annotations

import msgspec

import router
from gateway.pipeline.answers.exact import deterministic
from gateway.wire.chat import ChatCompletionRequest, Message, TextPart


def skipped(request: ChatCompletionRequest, policy: router.SemanticCachePolicy) -> str | None:
    """Why the semantic cache must leave this request alone, or None when it may answer it."""
    if not policy.enabled:
        return "off"
    if request.messages[-1].role != "user":
        return "the last turn is not the user's"
    if not policy.allow_tools and any(m.role == "tool" for m in request.messages):
        return "tool results"
    if not policy.allow_sampling and not deterministic(request):
        return "sampled"
    return None


def last_text(request: ChatCompletionRequest) -> str:
    """The text of the last (user) turn, its text parts joined by newlines."""
    content = request.messages[-1].content
    if isinstance(content, str):
        return content.strip()
    if not content:
        return ""
    return "\n".join(p.text for p in content if isinstance(p, TextPart)).strip()


def without_last_text(request: ChatCompletionRequest) -> ChatCompletionRequest:
    """The request with its last turn's text taken out, its media kept (the context's key)."""
    last = request.messages[-1]
    content = last.content
    if isinstance(content, list):
        kept: str | list[object] = [p for p in content if not isinstance(p, TextPart)]
    else:
        kept = ""
    blank = msgspec.structs.replace(last, content=kept)
    messages: list[Message] = [*request.messages[:-1], blank]
    return msgspec.structs.replace(request, messages=messages)
