"""One ledger row: what one answered request was, where it ran, and what it cost."""

from __future__ import annotations

import itertools
import os

import msgspec


class LedgerRow(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    entry_id: str
    request_id: str
    tenant_id: int
    key_id: str
    ts: float
    day: str
    model_asked: str
    tier: str
    model_used: str
    route_reason: str
    prompt_tokens: int
    completion_tokens: int
    images: int
    audio: int
    video: int
    ttft_ms: float | None
    total_ms: float
    cache_hit: bool
    degraded: bool
    status: int
    error: str | None
    price_id: int | None
    cost_nusd: int
    counterfactual_nusd: int
    # The request's metadata (OpenAI's, up to 16 short pairs) as JSON, for cost by tag; None: none.
    # Last and defaulted, so write-ahead segments of rows from before it still load.
    metadata: str | None = None
    # The row's cost tags (JSON object, keys sorted; see _tags.py); None: none. Defaulted, like metadata.
    tags: str | None = None
    # Which API answered: "chat" or "embeddings" (schema v4); defaulted for older segments.
    endpoint: str = "chat"
    # Of prompt_tokens, those read from and written to a prompt cache, each billed at its own price
    # (schema v7); defaulted for older segments.
    cached_tokens: int = 0
    cache_write_tokens: int = 0


encode_row = msgspec.json.Encoder().encode
decode_row = msgspec.json.Decoder(LedgerRow).decode


class EntryIds:
    """Unique row ids (32 hex characters, like a uuid4's): 64 random bits drawn once per process,
    then a counter. A uuid4 per row costs a getrandom() system call and the UUID class's checks,
    ~1% of a request's CPU; a forked child draws its own bits."""

    def __init__(self) -> None:
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count()

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count):016x}"


new_entry_id = EntryIds()
