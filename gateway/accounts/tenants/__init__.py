"""Tenants, their API keys and their rate limits.

:class:`TenantStore` keeps tenants and keys in the database (only key hashes);
:class:`Authenticator` turns a request's key (bearer, or ``x-api-key``) into a :class:`Caller`;
a :class:`RateLimiter` (in-process or Redis) admits or refuses each request.
"""

from gateway.accounts.tenants._access import READ_ONLY, check_change, check_not_read_only, check_read
from gateway.accounts.tenants._auth import Authenticator, key_of
from gateway.accounts.tenants._keylimits import NO_LIMITS, KeyLimits, check_tiers, checked_limits
from gateway.accounts.tenants._keys import hash_key, key_id_of, matches, new_key
from gateway.accounts.tenants._limits import (
    Demand,
    LocalLimiter,
    RateLimiter,
    RedisLimiter,
    key_scope,
    make_limiter,
)
from gateway.accounts.tenants._models import (
    ADMIN,
    DEFAULT_TENANT,
    OPEN_MODE_KEY_ID,
    TENANT,
    TENANT_ADMIN,
    TENANT_ROLES,
    VIEWER,
    Caller,
    KeyInfo,
    NewKey,
    Tenant,
)
from gateway.accounts.tenants._settings import LimitSettings, TenantLimits
from gateway.accounts.tenants._store import TenantStore, check_tenant_name
from gateway.accounts.tenants._throttle import FailureThrottle

__all__ = [
    "ADMIN",
    "DEFAULT_TENANT",
    "NO_LIMITS",
    "OPEN_MODE_KEY_ID",
    "READ_ONLY",
    "TENANT",
    "TENANT_ADMIN",
    "TENANT_ROLES",
    "VIEWER",
    "Authenticator",
    "Caller",
    "Demand",
    "FailureThrottle",
    "KeyInfo",
    "KeyLimits",
    "LimitSettings",
    "LocalLimiter",
    "NewKey",
    "RateLimiter",
    "RedisLimiter",
    "Tenant",
    "TenantLimits",
    "TenantStore",
    "check_change",
    "check_not_read_only",
    "check_read",
    "check_tenant_name",
    "check_tiers",
    "checked_limits",
    "hash_key",
    "key_id_of",
    "key_of",
    "key_scope",
    "make_limiter",
    "matches",
    "new_key",
]
