"""Tenant routing policies: stored with every version (:class:`PolicyStore`), read by the
request path from an in-memory copy kept current (:class:`PolicyBook`)."""

from gateway.accounts.policies._book import PolicyBook
from gateway.accounts.policies._store import DEFAULT_KEY, PolicyChange, PolicyRecord, PolicyStore, invalid

__all__ = ["DEFAULT_KEY", "PolicyBook", "PolicyChange", "PolicyRecord", "PolicyStore", "invalid"]
