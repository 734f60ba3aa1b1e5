"""Anthropic's Messages API as a provider dialect: ``POST {base_url}/v1/messages`` with ``x-api-key``
and ``anthropic-version`` (2023-06-01 unless the tier's ``api_version`` says another), streamed or not.

The body is the shared translation of the generation (_request.py); the answer's message or events are
read back by the same module pair (_answer.py).  What Anthropic's API has no field for is an ability
this dialect lacks (logprobs, n > 1, logit_bias, json_object), so the router never sends such a request
here and one pinned here gets OpenAI's error for it; vLLM's sampling extras other than top_k are refused
(400) rather than sent without them.

Errors: 429 (``retry-after``), 529 ``overloaded_error`` and 5xx move the request to the next tier of the
plan before its first byte; 401/403 is a refused key; another 4xx (``invalid_request_error``: a prompt
too long, a refused image) is the client's error and leaves the tier healthy (``failure_of``).  An
``error`` event mid-stream ends the answer (before any piece of it: the next tier serves it).  The
``anthropic-ratelimit-requests-remaining`` and ``-tokens-remaining`` headers are the headroom.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from datetime import datetime

from tiers._errors import TierError, TierFailed, TierRejected, TierUnavailable
from tiers._events import Event, Finished
from tiers._types import ALL_ABILITIES, Ability, Generation
from tiers.cloud.provider._config import ProviderConfig
from tiers.cloud.provider._dialect import Headroom, Outgoing, SseEvent, failure_of
from tiers.cloud.provider.anthropic._answer import StreamError, StreamReader, events_of_message
from tiers.cloud.provider.anthropic._request import params_of

VERSION = "2023-06-01"
# What Anthropic's API cannot express.
ABSENT = frozenset({Ability.LOGPROBS, Ability.CHOICES, Ability.LOGIT_BIAS, Ability.JSON_OBJECT})
# Fields with no Anthropic counterpart: refused when set to anything but their neutral value, not sent
# without them. (``seed`` is not among them: OpenAI's own contract for it is best effort, so an answer
# without it keeps that contract; it is not sent.)
_NOT_ANTHROPIC: dict[str, tuple[object, ...]] = {
    "min_p": (None,),
    "repetition_penalty": (None, 1.0),
    "min_tokens": (0,),
    "ignore_eos": (False,),
    "presence_penalty": (None, 0.0),
    "frequency_penalty": (None, 0.0),
}


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _reset_s(value: str | None) -> float | None:
    """Anthropic's ``…-reset`` headers are RFC 3339 times; seconds from now."""
    if not value:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, when.timestamp() - datetime.now(when.tzinfo).timestamp())


def error_detail(body: bytes) -> tuple[str, str | None]:
    """An Anthropic error body's message and type (the body's text when it is not one)."""
    try:
        error = json.loads(body)["error"]
        return str(error.get("message", "")), str(error.get("type") or "") or None
    except (ValueError, KeyError, TypeError, AttributeError):
        return body[:500].decode("utf-8", "replace").strip(), None


class AnthropicDialect:
    abilities = ALL_ABILITIES - ABSENT

    def __init__(self, tier: str, config: ProviderConfig, key: str) -> None:
        self._tier = tier
        self._config = config
        self._url = f"{config.base_url.rstrip('/')}/v1/messages"
        self._headers = {**config.headers, "anthropic-version": config.api_version or VERSION}
        if key:
            self._headers["x-api-key"] = key

    def request(self, gen: Generation) -> Outgoing:
        for name, neutral in _NOT_ANTHROPIC.items():
            if getattr(gen, name) not in neutral:
                raise TierRejected(
                    self._tier,
                    f"{name} is not part of Anthropic's API; this tier cannot honour it",
                    param=name,
                )
        if gen.stop_token_ids:
            raise TierRejected(
                self._tier, "stop_token_ids is not part of Anthropic's API", param="stop_token_ids"
            )
        try:
            body = params_of(
                gen,
                self._config.model,
                default_max_tokens=self._config.max_output_tokens,
                cache_prefix=self._config.cache_prefix,
            )
        except ValueError as exc:
            raise TierRejected(self._tier, str(exc), param="messages") from exc
        if not body["messages"]:
            raise TierRejected(self._tier, "the conversation has no user turn", param="messages")
        return Outgoing(self._url, self._headers, json.dumps(body).encode())

    def answer(self, body: bytes, gen: Generation) -> list[Event]:
        message = json.loads(body)
        if not isinstance(message, dict) or message.get("type") != "message":
            raise TierFailed(self._tier, "the provider's answer is not a message")
        return events_of_message(message)

    async def stream(self, events: AsyncIterator[SseEvent], gen: Generation) -> AsyncIterator[Event]:
        reader = StreamReader()
        begun = False
        async for event in events:
            try:
                pieces = reader.read(json.loads(event.data))
            except StreamError as exc:
                if not begun:  # nothing reached the client: the next tier of the plan may serve it
                    raise TierUnavailable(self._tier, f"the provider failed before answering: {exc}") from exc
                raise TierFailed(self._tier, f"the provider failed mid-answer: {exc}") from exc
            for piece in pieces:
                begun = True
                yield piece
                if isinstance(piece, Finished):
                    return
        yield Finished(reader.reason, reader.usage)  # the stream ended without message_stop

    def failure(self, status: int, headers: Mapping[str, str], body: bytes) -> TierError:
        message, kind = error_detail(body)
        if status == 400 and "prompt is too long" in message:  # Anthropic's words for it
            return failure_of(self._tier, status, headers, message, "context_length_exceeded", "messages")
        if status in (401, 403):  # the reason names Anthropic's error type (authentication_error, ...)
            return failure_of(self._tier, status, headers, message, kind)
        return failure_of(self._tier, status, headers, f"{kind}: {message}" if kind else message)

    def headroom(self, headers: Mapping[str, str]) -> Headroom | None:
        requests = _int(headers.get("anthropic-ratelimit-requests-remaining"))
        tokens = _int(headers.get("anthropic-ratelimit-tokens-remaining"))
        if requests is None and tokens is None:
            return None
        resets = [
            _reset_s(headers.get(f"anthropic-ratelimit-{kind}-reset"))
            for kind, left in (("requests", requests), ("tokens", tokens))
            if left == 0
        ]
        known = [r for r in resets if r is not None]
        return Headroom(requests, tokens, max(known) if known else None)
