"""Budgets in USD from the ledger's costs: a tenant's own and its cost tags' (``BudgetBook``), and each
key's per day and per month (``KeyBudgets``)."""

from gateway.accounts.budgets._keys import KeyBudgets, KeySpend, spent_by_key
from gateway.accounts.budgets._tenants import (
    TENANT_BUDGET,
    BudgetBook,
    period_bounds,
    spent_tag_usd,
    spent_usd,
)

__all__ = [
    "TENANT_BUDGET",
    "BudgetBook",
    "KeyBudgets",
    "KeySpend",
    "period_bounds",
    "spent_by_key",
    "spent_tag_usd",
    "spent_usd",
]
