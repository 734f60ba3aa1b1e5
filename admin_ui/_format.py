"""Template filters: times, money, names."""

from __future__ import annotations

import datetime as dt


def utc_time(ts: float | None, with_date: bool = False) -> str:
    if ts is None:
        return "–"
    moment = dt.datetime.fromtimestamp(ts, dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M" if with_date else "%H:%M:%S")


def usd(amount: float) -> str:
    """Dollars with enough digits for the tiny per-request amounts of small models."""
    if amount == 0:
        return "$0"
    if abs(amount) >= 1:
        return f"${amount:,.2f}"
    return f"${amount:.6f}".rstrip("0")


def limit_label(field: str) -> str:
    """``requests_per_min`` → ``Requests/min``."""
    return field.removesuffix("_per_min").replace("_", " ").capitalize() + "/min"


_KEY_LIMIT_LABELS = {
    "budget_day_usd": "Budget per UTC day (USD)",
    "budget_month_usd": "Budget per UTC month (USD)",
    "tiers": "Tiers (comma list)",
    "models": "Models (comma list)",
    "expires_at": "Expires (UTC, ISO-8601)",
    "requests_per_min": "Requests/min",
    "tokens_per_min": "Tokens/min",
}


def key_limit_label(field: str) -> str:
    """A key's own limit's label: ``budget_day_usd`` → ``Budget per UTC day (USD)``."""
    return _KEY_LIMIT_LABELS.get(field, field)
