"""Hosted model providers as tiers (``kind = "provider"``): OpenAI, Azure OpenAI, vendors that speak
OpenAI's protocol, and Anthropic, each one account and one model behind :class:`ProviderTier`.
A protocol is a :class:`Dialect` (see :mod:`tiers.cloud.provider._dialect` for the contract)."""

from tiers.cloud.provider._config import ProviderConfig, ProviderTimeouts
from tiers.cloud.provider._dialect import Dialect, Headroom, Outgoing, SseEvent, failure_of, retry_after_s
from tiers.cloud.provider._dialects import DIALECTS, dialect_for
from tiers.cloud.provider._keys import KeyMissing, read_key
from tiers.cloud.provider._tier import ProviderTier

__all__ = [
    "DIALECTS",
    "Dialect",
    "Headroom",
    "KeyMissing",
    "Outgoing",
    "ProviderConfig",
    "ProviderTier",
    "ProviderTimeouts",
    "SseEvent",
    "dialect_for",
    "failure_of",
    "read_key",
    "retry_after_s",
]
