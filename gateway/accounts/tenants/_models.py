"""Values the tenants package hands out: tenants, keys, and the caller of a request."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from gateway.settings import TenantLimits

ADMIN = "admin"
TENANT = "tenant"
DEFAULT_TENANT = "default"


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    id: int
    name: str
    created_at: float
    limits: TenantLimits  # effective: the tenant's own, else the configured default


class KeyInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    tenant: str | None  # None for admin keys
    role: str
    name: str
    created_at: float
    revoked_at: float | None = None


class NewKey(msgspec.Struct, frozen=True, kw_only=True):
    """A key as created: ``key`` is shown this once and never stored."""

    id: str
    tenant: str | None
    role: str
    name: str
    key: str


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: an admin (all tenants) or a tenant's key (that tenant only)."""

    key_id: str
    role: str
    tenant: Tenant | None  # None for admin keys

    @property
    def is_admin(self) -> bool:
        return self.role == ADMIN

    def may_see(self, tenant_name: str) -> bool:
        return self.is_admin or (self.tenant is not None and self.tenant.name == tenant_name)
