"""The dialect of each protocol a provider tier may speak (``protocol`` in its settings)."""

from __future__ import annotations

from collections.abc import Callable

from tiers.cloud.provider._config import ProviderConfig
from tiers.cloud.provider._dialect import Dialect
from tiers.cloud.provider._openai import OpenAIDialect
from tiers.cloud.provider.anthropic import AnthropicDialect

# protocol -> (tier name, settings, key) -> its dialect; one module per protocol.
DIALECTS: dict[str, Callable[[str, ProviderConfig, str], Dialect]] = {
    "openai": OpenAIDialect,
    "azure": OpenAIDialect,  # the same body; the URL and the key's header differ
    "anthropic": AnthropicDialect,
}


def dialect_for(tier: str, config: ProviderConfig, key: str) -> Dialect:
    """The dialect for ``config.protocol``. Raises :class:`ValueError` for one not built here."""
    make = DIALECTS.get(config.protocol)
    if make is None:
        raise ValueError(f"tiers.{tier}: protocol {config.protocol!r} is not supported by this build")
    return make(tier, config, key)
