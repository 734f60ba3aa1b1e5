"""Tenant routing policies: stored with every version (:class:`PolicyStore`), read by the
request path from an in-memory copy kept current (:class:`PolicyBook`).

The policy's own types come from the router; they are re-exported here for the policy editor
(the admin UI sees the router only through the gateway).
"""

from gateway.accounts.policies._book import PolicyBook
from gateway.accounts.policies._store import DEFAULT_KEY, PolicyChange, PolicyRecord, PolicyStore
from router import PERIODS, PolicyInvalid, TenantPolicy, canonical_strategy, decode_policy, strategy_names
from tiers import Modality

# The media a policy's modality rules can name.
POLICY_MEDIA = tuple(m.value for m in Modality if m is not Modality.TEXT)

__all__ = [
    "DEFAULT_KEY",
    "PERIODS",
    "POLICY_MEDIA",
    "PolicyBook",
    "PolicyChange",
    "PolicyInvalid",
    "PolicyRecord",
    "PolicyStore",
    "TenantPolicy",
    "canonical_strategy",
    "decode_policy",
    "strategy_names",
]
