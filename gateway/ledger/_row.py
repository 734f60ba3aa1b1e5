"""One ledger row: what one answered request was, where it ran, and what it cost."""

from __future__ import annotations

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


encode_row = msgspec.json.Encoder().encode
decode_row = msgspec.json.Decoder(LedgerRow).decode
