"""The admin API's operations, each scoped to its caller.

An admin key sees every tenant.  A tenant's key sees its own tenant, keys and reports;
anything of another tenant is answered as if it did not exist (404), and creating
tenants is refused (403).
"""

from __future__ import annotations

import asyncio
from typing import Any

from gateway.accounts.ledger import ReportQuery, cost_report
from gateway.accounts.tenants import Authenticator, Caller, KeyInfo, NewKey, Tenant, TenantStore
from gateway.errors import NotFound, PermissionDenied


class AdminService:
    def __init__(self, store: TenantStore, auth: Authenticator) -> None:
        self._store = store
        self._auth = auth

    def _visible(self, caller: Caller, tenant: str) -> None:
        if not caller.may_see(tenant):
            raise NotFound(f"no tenant named {tenant!r}")

    async def tenants(self, caller: Caller) -> list[Tenant]:
        if caller.is_admin:
            return await asyncio.to_thread(self._store.list_tenants)
        assert caller.tenant is not None
        return [await asyncio.to_thread(self._store.tenant, caller.tenant.name)]

    async def tenant(self, caller: Caller, name: str) -> Tenant:
        self._visible(caller, name)
        return await asyncio.to_thread(self._store.tenant, name)

    async def create_tenant(self, caller: Caller, name: str, limits: dict[str, int] | None) -> Tenant:
        if not caller.is_admin:
            raise PermissionDenied("only an admin key can create tenants")
        return await asyncio.to_thread(self._store.create_tenant, name, limits)

    async def keys(self, caller: Caller, tenant: str) -> list[KeyInfo]:
        self._visible(caller, tenant)
        return await asyncio.to_thread(self._store.list_keys, tenant)

    async def create_key(self, caller: Caller, tenant: str, name: str) -> NewKey:
        self._visible(caller, tenant)
        return await asyncio.to_thread(self._store.create_key, tenant, name)

    async def revoke_key(self, caller: Caller, key_id: str) -> KeyInfo:
        key = await asyncio.to_thread(self._store.key, key_id)
        if not caller.is_admin and (key.tenant is None or not caller.may_see(key.tenant)):
            raise NotFound(f"no key with id {key_id!r}")
        revoked = await asyncio.to_thread(self._store.revoke_key, key_id)
        self._auth.forget(key_id)
        return revoked

    async def cost_report(
        self,
        caller: Caller,
        tenant: str | None,
        since: str | None,
        until: str | None,
        group_by: str | None,
    ) -> dict[str, Any]:
        if not caller.is_admin:
            assert caller.tenant is not None
            tenant = tenant or caller.tenant.name
        query = ReportQuery.parse(tenant, since, until, group_by)
        if not caller.is_admin and "tenant" in query.group_by:
            raise PermissionDenied("only an admin key can group costs by tenant")
        tenant_id = None
        if query.tenant is not None:
            tenant_id = (await self.tenant(caller, query.tenant)).id
        return await asyncio.to_thread(cost_report, self._store.engine, query, tenant_id)
