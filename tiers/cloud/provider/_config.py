"""Typed configuration of a provider tier: one account at a hosted model provider and one of its models
(``[tiers.<name>]`` with ``kind = "provider"``). The key is never in it: only where to read it."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from tiers._types import Ability, Modality

Protocol = Literal["openai", "azure", "anthropic"]
HeaderName = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9-]{1,64}$")]
# Headers the tier sets itself: one in `headers` would carry or override the key.
RESERVED_HEADERS = frozenset(
    {"authorization", "api-key", "x-api-key", "content-type", "content-length", "host"}
)


class ProviderTimeouts(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Deadlines for one call to the provider, in seconds. A call that has not connected, or whose
    answer has not begun, in time is passed to the next tier of the plan; ``total_s`` bounds the whole
    answer (a stream is cut there, and billed for what came)."""

    connect_s: float = 5.0
    first_byte_s: float = 60.0
    total_s: float = 600.0


class ProviderConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    # "openai": Chat Completions at base_url (OpenAI and vendors that speak its protocol);
    # "azure": Azure OpenAI (api-key header, deployment in the path, api-version query);
    # "anthropic": Anthropic's Messages API.
    protocol: Protocol = "openai"
    # e.g. "https://api.openai.com/v1", "https://myres.openai.azure.com", "https://api.anthropic.com"
    base_url: str = ""
    # The provider's own model id, sent upstream (Azure: the deployment's name).
    model: str = ""
    # Where the key is read at start: an environment variable's name, or a file holding it (one line).
    # Neither: no key is sent (a vendor on the local network that needs none).
    api_key_env: str = ""
    api_key_file: str = ""
    # A PEM bundle of the CAs to trust instead of the system's (an on-prem proxy or vendor).
    ca_file: str = ""
    organization: str = ""  # openai: OpenAI-Organization header
    project: str = ""  # openai: OpenAI-Project header
    # azure: the api-version query (e.g. "2024-10-21"); anthropic: the anthropic-version header.
    api_version: str = ""
    # More headers sent with every call (not the key's: those are refused).
    headers: dict[HeaderName, str] = msgspec.field(default_factory=dict)
    timeouts: ProviderTimeouts = msgspec.field(default_factory=ProviderTimeouts)
    # Declared quality level (0..1), compared by the router with a request's difficulty.
    quality: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.9
    context_tokens: Annotated[int, msgspec.Meta(gt=0)] = 128_000
    # The answer's length when the client gives none, for protocols that need one (anthropic).
    max_output_tokens: Annotated[int, msgspec.Meta(gt=0)] = 4096
    # anthropic: a prompt-cache breakpoint at the end of the system prompt (else the tools) of a request
    # that marks none itself (a client's own cache_control blocks always reach Anthropic).
    cache_prefix: bool = False
    modalities: list[Modality] = msgspec.field(default_factory=lambda: [Modality.TEXT, Modality.IMAGE])
    # What the model can do beyond text; empty: all its protocol can express (see docs/providers.md).
    abilities: list[Ability] = msgspec.field(default_factory=list)
    # "remote": residency rules keep local and redacted text from it; "local": a model on your own site.
    location: Literal["local", "remote"] = "remote"
    max_connections: Annotated[int, msgspec.Meta(gt=0)] = 100
    http2: bool = True  # negotiated by ALPN: a server that offers only HTTP/1.1 gets that
    # After the provider refuses the key (401/403), the tier stays down this long, then reads the key
    # again (a file rotated meanwhile) and tries once more.
    key_retry_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0

    def __post_init__(self) -> None:
        if self.api_key_env and self.api_key_file:
            raise ValueError("give api_key_env or api_key_file, not both")
        if self.enabled and not self.base_url.startswith(("https://", "http://")):
            raise ValueError(f"base_url must be an http(s) URL, not {self.base_url!r}")
        if self.enabled and not self.model:
            raise ValueError("model: the provider's model id (Azure: the deployment) is needed")
        if self.protocol == "azure" and self.enabled and not self.api_version:
            raise ValueError("api_version: Azure OpenAI needs one, e.g. 2024-10-21")
        taken = sorted(h for h in self.headers if h.lower() in RESERVED_HEADERS)
        if taken:
            raise ValueError(f"headers: {taken[0]} is set by the tier itself")
