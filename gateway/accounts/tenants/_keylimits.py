"""A key's own limits, beneath its tenant's: what it may spend, use, and until when.

Every field's zero value means "no limit of its own" (the tenant's apply alone).  They are enforced
in the one front every endpoint takes (gateway/pipeline/front.py: the model, the budget, the
per-minute counts; gateway/pipeline/plan.py: the tiers a routed request may land on) and by the
authenticator (the expiry, a rotation's overlap).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

import msgspec

from gateway.errors import InvalidRequest


class KeyLimits(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    budget_day_usd: float = 0.0  # spend per UTC day (the ledger's costs); 0: none of its own
    budget_month_usd: float = 0.0  # per UTC calendar month
    tiers: tuple[str, ...] = ()  # the tiers it may be served by; empty: every tier
    models: tuple[str, ...] = ()  # the model names it may ask for; empty: every model
    expires_at: float | None = None  # epoch seconds; from then on the key is a 401
    requests_per_min: int = 0
    tokens_per_min: int = 0

    @property
    def budgeted(self) -> bool:
        return self.budget_day_usd > 0 or self.budget_month_usd > 0

    def allows_tier(self, tier: str) -> bool:
        return not self.tiers or tier in self.tiers

    def allows_model(self, model: str) -> bool:
        return not self.models or model in self.models


NO_LIMITS = KeyLimits()
FIELDS = tuple(KeyLimits.__struct_fields__)


def names(value: str | list[str] | tuple[str, ...] | None, param: str) -> tuple[str, ...]:
    """A comma list (or a list) of names, without blanks; each name checked for its column."""
    if value is None:
        return ()
    if not isinstance(value, str | list | tuple) or not all(isinstance(i, str) for i in value):
        raise InvalidRequest(f"{param} must be a comma list or a list of names", param=param)
    items = value.split(",") if isinstance(value, str) else list(value)
    out = tuple(dict.fromkeys(i.strip() for i in items if i.strip()))
    for item in out:
        if len(item) > 256 or "," in item:
            raise InvalidRequest(f"invalid name {item!r} in {param}", param=param)
    return out


def instant(value: str | float | None, param: str = "expires_at") -> float | None:
    """An ISO-8601 date-time (UTC unless it says; ``Z`` allowed) or epoch seconds; empty/None: none."""
    if value is None or value == "" or value == "none":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        raise InvalidRequest(f"{param} must be an ISO-8601 date-time", param=param)
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise InvalidRequest(f"{param} must be an ISO-8601 date-time: {exc}", param=param) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


def checked_limits(changes: dict[str, Any], base: KeyLimits = NO_LIMITS) -> KeyLimits:
    """``base`` with ``changes`` (field → value as given by the CLI or the API) applied and checked."""
    unknown = set(changes) - set(FIELDS)
    if unknown:
        raise InvalidRequest(f"unknown key limits: {', '.join(sorted(unknown))}", param="limits")
    values: dict[str, Any] = {}
    for field, value in changes.items():
        if value is None:  # none of its own
            values[field] = getattr(NO_LIMITS, field)
        elif field in ("tiers", "models"):
            values[field] = names(value, field)
        elif field == "expires_at":
            values[field] = instant(value)
        elif field.startswith("budget_"):
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise InvalidRequest(f"{field} must be a number of USD >= 0", param=field)
            values[field] = float(value)
        else:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InvalidRequest(f"{field} must be an integer >= 0", param=field)
            values[field] = value
    return msgspec.structs.replace(base, **values)


def check_tiers(limits: KeyLimits, tiers: Collection[str]) -> KeyLimits:
    """A key's tiers must be this gateway's (a misspelt one would keep the key off every tier)."""
    unknown = [t for t in limits.tiers if t not in tiers]
    if unknown:
        raise InvalidRequest(
            f"no tier named {', '.join(unknown)}; tiers: {', '.join(sorted(tiers))}", param="tiers"
        )
    return limits


def to_row(limits: KeyLimits) -> dict[str, Any]:
    """The api_keys columns for ``limits`` (NULL where there is none)."""
    return {
        "budget_day_usd": limits.budget_day_usd or None,
        "budget_month_usd": limits.budget_month_usd or None,
        "tiers": ",".join(limits.tiers) or None,
        "models": ",".join(limits.models) or None,
        "expires_at": limits.expires_at,
        "requests_per_min": limits.requests_per_min or None,
        "tokens_per_min": limits.tokens_per_min or None,
    }


def from_row(row: Any) -> KeyLimits:
    return KeyLimits(
        budget_day_usd=row.budget_day_usd or 0.0,
        budget_month_usd=row.budget_month_usd or 0.0,
        tiers=names(row.tiers, "tiers"),
        models=names(row.models, "models"),
        expires_at=row.expires_at,
        requests_per_min=row.requests_per_min or 0,
        tokens_per_min=row.tokens_per_min or 0,
    )
