"""What a provider protocol implements (:class:`Dialect`), and the parts every protocol shares.

A :class:`~tiers.cloud.provider.ProviderTier` does the transport (one pooled HTTPS client, timeouts,
the key, health, rate-limit headroom, in-flight counts) and leaves to its dialect everything that is
the protocol's own: the URL, headers and JSON body of a call, reading the answer (a JSON body or a
server-sent event stream) as the tier's events, what an HTTP error answer means, and which headers
tell the remaining rate limit.  One dialect per protocol, each in its own module (``_openai.py``:
OpenAI and Azure OpenAI; ``_anthropic.py``: Anthropic's Messages API), chosen by
:func:`~tiers.cloud.provider._dialects.dialect_for`.

The contract, as the tier relies on it:

- :meth:`Dialect.request` raises :class:`~tiers.TierRejected` (code and param set when known) for a
  request the protocol cannot express (logprobs on Anthropic, ``n`` > 1 where there is no ``n``);
  it never drops a field silently.  It raises nothing else and does no I/O.
- :meth:`Dialect.answer` and :meth:`Dialect.stream` yield only answer events: :class:`~tiers.TextDelta`,
  :class:`~tiers.ToolCallDelta` (``id`` and ``name`` on a call's first piece, OpenAI's ``call_…`` or the
  provider's own id), :class:`~tiers.Logprobs`, :class:`~tiers.ChoiceDone` (choices past the first of
  an n > 1 answer), and last exactly one :class:`~tiers.Finished` with the provider's reported
  :class:`~tiers.Usage` (``cached_tokens``: cache reads; ``cache_write_tokens``: cache writes) and
  OpenAI's finish_reason (``stop``, ``length``, ``tool_calls``, ``content_filter``).  Never
  :class:`~tiers.Started`: the tier yields that itself with the first piece.
- A provider's error in the middle of a stream (OpenAI's ``{"error": …}`` chunk, Anthropic's ``error``
  event) raises :class:`~tiers.TierFailed` with the provider's message; a body that is not the
  protocol's raises :class:`~tiers.TierFailed` too (the tier turns ``msgspec``/``ValueError``
  decoding errors into it as well).
- :meth:`Dialect.failure` reads a non-2xx answer: most dialects parse the provider's error body and
  hand it to :func:`failure_of`, which maps statuses the same way for every protocol.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from tiers._errors import KeyRefused, TierError, TierFailed, TierOverloaded, TierRejected, TierUnavailable
from tiers._events import Event
from tiers._types import Ability, Generation


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One call to the provider: POST ``body`` (JSON) to ``url`` with ``headers`` (the key's included;
    the tier adds none but Content-Type)."""

    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One server-sent event: its ``event:`` name ("" when it had none) and its ``data:`` lines."""

    event: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Headroom:
    """What the provider says is left of its rate limits (None: not said): requests and tokens, and in
    how many seconds they refill. The tier keeps the latest and reports it in its state; the router
    steers away from a tier with none left until ``reset_s`` has passed."""

    requests: int | None = None
    tokens: int | None = None
    reset_s: float | None = None

    def exhausted(self, in_flight: int = 0) -> bool:
        """None left for another call: no tokens, or no more requests than are in flight already (each
        of those will take one of them)."""
        return (self.requests is not None and self.requests <= in_flight) or self.tokens == 0


class Dialect(Protocol):
    """One provider protocol. Built per tier by :func:`~tiers.cloud.provider._dialects.dialect_for`
    from the tier's name, :class:`~tiers.cloud.provider.ProviderConfig` and key ("" when none)."""

    # What the protocol can express beyond text; a tier's configured ``abilities`` narrow it.
    abilities: frozenset[Ability]

    def request(self, gen: Generation) -> Outgoing:
        """The call for ``gen``, streamed (SSE) when ``gen.stream`` is set, else a JSON answer.
        Raises :class:`~tiers.TierRejected` for what the protocol cannot express."""
        ...

    def answer(self, body: bytes, gen: Generation) -> list[Event]:
        """A 2xx JSON body as the answer's events (pieces, then one :class:`~tiers.Finished`)."""
        ...

    def stream(self, events: AsyncIterator[SseEvent], gen: Generation) -> AsyncIterator[Event]:
        """A 2xx event stream, as it arrives, as the answer's events; :class:`~tiers.TierFailed` for an
        error event. Ends after :class:`~tiers.Finished` (a stream that ends without its end marker
        still yields one, with the usage seen)."""
        ...

    def failure(self, status: int, headers: Mapping[str, str], body: bytes) -> TierError:
        """What a non-2xx answer means (headers with lower-case names); usually
        ``failure_of(tier, status, headers, message, code, param)`` with the body's error parsed."""
        ...

    def headroom(self, headers: Mapping[str, str]) -> Headroom | None:
        """The rate-limit headroom an answer's headers (lower-case names) tell, or None."""
        ...


def retry_after_s(headers: Mapping[str, str], default: float = 1.0) -> float:
    """``retry-after-ms`` (OpenAI), ``retry-after`` in seconds or as an HTTP date, else ``default``."""
    if ms := headers.get("retry-after-ms"):
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after", "")
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return default
    return max(0.0, when.timestamp() - time.time())


def failure_of(
    tier: str,
    status: int,
    headers: Mapping[str, str],
    message: str,
    code: str | None = None,
    param: str | None = None,
) -> TierError:
    """The tier error a provider's non-2xx answer is, the same for every protocol:

    - 401, 403: :class:`KeyRefused` (the operator must act; not retried, the tier goes down);
    - 429: :class:`~tiers.TierOverloaded` with the provider's ``retry-after`` (the plan moves on);
    - 408, 409, 5xx (Anthropic's 529 included): :class:`~tiers.TierUnavailable` (the plan moves on);
    - any other 4xx: :class:`~tiers.TierRejected`, the client's error with the provider's message,
      code and param (the tier stays healthy).
    """
    said = f"the provider answered {status}: {message[:500]}"
    if status in (401, 403):
        # Not the provider's message: OpenAI's quotes part of the refused key.
        return KeyRefused(
            tier,
            f"the provider refused the key ({status}{' ' + code if code else ''}); check the key the "
            "tier's api_key_env or api_key_file names, and that it may use this model",
        )
    if status == 429:
        return TierOverloaded(tier, said, retry_after_s(headers), reason="rate_limited")
    if status in (408, 409) or status >= 500:
        return TierUnavailable(tier, said)
    if 400 <= status < 500:
        return TierRejected(tier, message[:2000] or f"the provider answered {status}", code, param)
    return TierFailed(tier, said)
