"""OpenAI's Chat Completions as a provider dialect: OpenAI itself, vendors that speak its protocol at
another base URL, and Azure OpenAI (the ``api-key`` header, the deployment in the path, ``api-version``
in the query).  The request is the client's chat request as the gateway validated it, with the tier's
model; a legacy completion (``Generation.prompt``) goes as one user turn, since hosted chat models have
no ``/v1/completions``.  vLLM's sampling extras (top_k, min_p, ...) have no place in OpenAI's API: a
request that sets one is refused (400), not sent without it."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

from tiers._errors import TierError, TierFailed, TierRejected
from tiers._events import (
    ChoiceDone,
    Event,
    Finished,
    Logprobs,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
)
from tiers._types import ALL_ABILITIES, Generation, Usage
from tiers.cloud._shapes import WireChunk, WireCompletion, WireLogprobs, WireMessage, WireUsage
from tiers.cloud.provider._config import ProviderConfig
from tiers.cloud.provider._dialect import Headroom, Outgoing, SseEvent, failure_of

# Generation fields sent as they are when set (None: the provider's default).
_PASSED = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "reasoning_effort")
# vLLM's extras: not OpenAI's API, so a request that sets one is refused rather than sent without it.
_NOT_OPENAI = {
    "top_k": None,
    "min_p": None,
    "repetition_penalty": None,
    "min_tokens": 0,
    "ignore_eos": False,
}
_encode = msgspec.json.Encoder().encode
_completion = msgspec.json.Decoder(WireCompletion)
_chunk = msgspec.json.Decoder(WireChunk)


class _ErrorDetail(msgspec.Struct):
    message: str = ""
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


class _ErrorBody(msgspec.Struct):
    error: _ErrorDetail | str | None = None
    message: str = ""


_error = msgspec.json.Decoder(_ErrorBody)


def error_detail(body: bytes) -> tuple[str, str | None, str | None]:
    """An OpenAI-shaped error body's message, code and param (the body's text when it is not one)."""
    try:
        err = _error.decode(body)
    except msgspec.DecodeError:
        return body[:500].decode("utf-8", "replace").strip(), None, None
    if isinstance(err.error, _ErrorDetail):
        code = err.error.code
        return err.error.message, None if code is None else str(code), err.error.param
    return (err.error if isinstance(err.error, str) else err.message) or "", None, None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def duration_s(text: str) -> float | None:
    """OpenAI's reset durations ("1s", "6m0s", "20ms") in seconds; None for anything else."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


class OpenAIDialect:
    abilities = ALL_ABILITIES

    def __init__(self, tier: str, config: ProviderConfig, key: str) -> None:
        self._tier = tier
        self._config = config
        base = config.base_url.rstrip("/")
        self._headers = dict(config.headers)
        if config.protocol == "azure":
            deployment = quote(config.model, safe="")
            self._url = (
                f"{base}/openai/deployments/{deployment}/chat/completions?api-version={config.api_version}"
            )
            if key:
                self._headers["api-key"] = key
        else:
            self._url = f"{base}/chat/completions"
            if key:
                self._headers["authorization"] = f"Bearer {key}"
            if config.organization:
                self._headers["openai-organization"] = config.organization
            if config.project:
                self._headers["openai-project"] = config.project
        # OpenAI's own API and Azure's take max_completion_tokens (max_tokens is refused by reasoning
        # models); other vendors know max_tokens.
        host = urlsplit(base).hostname or ""
        official = config.protocol == "azure" or host == "api.openai.com"
        self._max_field = "max_completion_tokens" if official else "max_tokens"

    def request(self, gen: Generation) -> Outgoing:
        for name, default in _NOT_OPENAI.items():
            if getattr(gen, name) != default:
                raise TierRejected(
                    self._tier, f"{name} is not part of OpenAI's API; this tier cannot honour it", param=name
                )
        if gen.stop_token_ids:
            raise TierRejected(
                self._tier, "stop_token_ids is not part of OpenAI's API", param="stop_token_ids"
            )
        body: dict[str, Any] = {"messages": gen.messages}
        if self._config.protocol != "azure":
            body["model"] = self._config.model
        if gen.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        if gen.max_tokens is not None:
            body[self._max_field] = gen.max_tokens
        for key in _PASSED:
            value = getattr(gen, key)
            if value is not None:
                body[key] = value
        if gen.stop:
            body["stop"] = gen.stop
        if gen.n > 1:
            body["n"] = gen.n
        if gen.tools:
            body["tools"] = gen.tools
            if gen.tool_choice is not None:
                body["tool_choice"] = gen.tool_choice
            if gen.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = gen.parallel_tool_calls
        if gen.response_format is not None:
            body["response_format"] = gen.response_format
        if gen.logprobs:
            body["logprobs"] = True
            if gen.top_logprobs:
                body["top_logprobs"] = gen.top_logprobs
        if gen.logit_bias:
            body["logit_bias"] = {str(k): v for k, v in gen.logit_bias.items()}
        if gen.prompt_cache_key:
            body["prompt_cache_key"] = gen.prompt_cache_key
        return Outgoing(self._url, self._headers, _encode(body))

    def answer(self, body: bytes, gen: Generation) -> list[Event]:
        answer = _completion.decode(body)
        if not answer.choices:
            raise TierFailed(self._tier, "the provider answered without any choice")
        events: list[Event] = []
        reasons: dict[int, str] = {}
        for choice in answer.choices:
            events.extend(_pieces(choice.index, choice.message, choice.logprobs))
            reasons[choice.index] = choice.finish_reason or "stop"
        return [*events, *_ending(reasons, gen.n, answer.usage)]

    async def stream(self, events: AsyncIterator[SseEvent], gen: Generation) -> AsyncIterator[Event]:
        reasons: dict[int, str] = {}
        usage: WireUsage | None = None
        async for event in events:
            if event.data == b"[DONE]":
                break
            chunk = _chunk.decode(event.data)
            if chunk.error is not None:
                raise TierFailed(self._tier, f"the provider failed mid-answer: {chunk.error.message[:300]}")
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.finish_reason:
                    reasons[choice.index] = choice.finish_reason
                for piece in _pieces(choice.index, choice.delta, choice.logprobs):
                    yield piece
        for piece in _ending(reasons, gen.n, usage):
            yield piece

    def failure(self, status: int, headers: Mapping[str, str], body: bytes) -> TierError:
        message, code, param = error_detail(body)
        return failure_of(self._tier, status, headers, message, code, param)

    def headroom(self, headers: Mapping[str, str]) -> Headroom | None:
        requests = _int(headers.get("x-ratelimit-remaining-requests"))
        tokens = _int(headers.get("x-ratelimit-remaining-tokens"))
        if requests is None and tokens is None:
            return None
        resets = [
            duration_s(headers.get(f"x-ratelimit-reset-{kind}", ""))
            for kind, left in (("requests", requests), ("tokens", tokens))
            if left == 0
        ] or [duration_s(headers.get("x-ratelimit-reset-requests", ""))]
        known = [r for r in resets if r is not None]
        return Headroom(requests, tokens, max(known) if known else None)


def _logprobs(wire: WireLogprobs | None, choice: int) -> Logprobs | None:
    if wire is None or not wire.content:
        return None
    tokens = [
        TokenLogprob(
            t.token, t.logprob, t.bytes, [TopLogprob(a.token, a.logprob, a.bytes) for a in t.top_logprobs]
        )
        for t in wire.content
    ]
    return Logprobs(tokens, choice)


def _pieces(choice: int, message: WireMessage | None, logprobs: WireLogprobs | None) -> list[Event]:
    out: list[Event] = []
    if scored := _logprobs(logprobs, choice):
        out.append(scored)
    if message is None:
        return out
    if message.content:
        out.append(TextDelta(message.content, choice))
    for call in message.tool_calls or ():
        function = call.function
        name = (function.name if function else None) or ""
        arguments = (function.arguments if function else None) or ""
        out.append(ToolCallDelta(call.index, call.id or "", name, arguments, choice))
    return out


def _ending(reasons: dict[int, str], n: int, usage: WireUsage | None) -> list[Event]:
    """ChoiceDone for the choices past the first of an n > 1 answer, then Finished with the usage."""
    done: list[Event] = [ChoiceDone(i, reasons.get(i, "stop")) for i in range(1, n)]
    counts = usage.usage() if usage is not None else Usage(0, 0)
    return [*done, Finished(reasons.get(0, "stop"), counts)]
