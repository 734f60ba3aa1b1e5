"""Who calls and what it costs: tenants, keys and limits, policies, budgets, the ledger, the database."""
