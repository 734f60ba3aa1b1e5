"""Errors a tier (or its model registry) raises. The gateway maps them to HTTP answers in one place.

TierError
├── TierUnavailable      cannot serve now (down, starting, connect failed); try another tier
│   ├── TierTimeout      no answer within the tier's deadline
│   └── KeyRefused       a provider refused the tier's key: down until an operator acts (breaker opens)
├── TierOverloaded       its queue is full; the client should retry later (429)
├── TierRejected         the engine refused the request as invalid (e.g. too long) (400)
└── TierFailed           the engine failed after accepting the request (502)
    └── OutputRefused    its answer breaks what the request demanded (a schema, the tools) (502)

Raised before a generation's first event, TierUnavailable and TierOverloaded let the gateway try the
next tier; after it, any error ends the answer.

RegistryError            a model registry (:class:`~tiers.ModelRegistry`) refused an operator's change
├── UnknownModel         no version by that name (404)
├── InvalidModel         a version that cannot be registered or loaded (400)
└── NothingToRollBack    no earlier version to go back to (409)
"""

from __future__ import annotations


class TierError(Exception):
    def __init__(self, tier: str, message: str) -> None:
        super().__init__(f"{tier}: {message}")
        self.tier = tier
        self.message = message


class TierUnavailable(TierError):
    pass


class TierTimeout(TierUnavailable):
    pass


class KeyRefused(TierUnavailable):
    """A hosted provider refused the tier's key (401, 403): no call will succeed until an operator
    acts, so the gateway opens the tier's breaker at once rather than counting failures, and nothing
    is retried there."""


class TierOverloaded(TierError):
    def __init__(
        self, tier: str, message: str, retry_after_s: float = 1.0, reason: str = "tier_busy"
    ) -> None:
        super().__init__(tier, message)
        self.retry_after_s = retry_after_s
        self.reason = reason  # a short class for metrics: queue_fast, queue_slow, upstream, ...


class TierRejected(TierError):
    """``code``/``param``: OpenAI's error code and the request field at fault, when the tier knows them
    (a prompt over its context: ``context_length_exceeded``, ``messages``)."""

    def __init__(self, tier: str, message: str, code: str | None = None, param: str | None = None) -> None:
        super().__init__(tier, message)
        self.code = code
        self.param = param


def too_long(tier: str, prompt_tokens: int, max_tokens: int | None, context_tokens: int) -> TierRejected:
    """A prompt (and the answer asked for) over the model's context, as OpenAI words it."""
    asked = f" and {max_tokens} for the answer" if max_tokens else ""
    return TierRejected(
        tier,
        f"This model's maximum context length is {context_tokens} tokens; the prompt is {prompt_tokens} "
        f"tokens{asked}. Shorten the messages or max_tokens.",
        code="context_length_exceeded",
        param="messages",
    )


class TierFailed(TierError):
    pass


class OutputRefused(TierFailed):
    """The engine answered, but not as the request demanded (a tool call to no offered tool, arguments
    or content that break the request's schema): refused rather than passed on as valid (502)."""


class RegistryError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class UnknownModel(RegistryError):
    pass


class InvalidModel(RegistryError):
    pass


class NothingToRollBack(RegistryError):
    pass
