"""The admin API's operations, each scoped to its caller.

An admin key sees every tenant.  A tenant's key sees its own tenant and reports; anything of
another tenant is answered as if it did not exist (404), and creating tenants is refused (403).
Keys are managed (listed, created, revoked) by an admin key or by a tenant's ``tenant-admin``
key, for that tenant only; an inference key (role ``tenant``) and open mode get 403.  Only an
admin key creates ``tenant-admin`` keys, and only an admin key sets, changes or rotates a key's own
limits (budgets, tiers, models, expiry, per-minute counts): a tenant-admin key may mint keys for its
tenant, but not lift or set what keys are allowed.

A person signed in through single sign-on comes as a caller too: a viewer reads what an admin reads
and every change is refused (403, :mod:`gateway.accounts.tenants._access`); a tenant admin among them
acts as a tenant-admin key of each of their tenants.

Every change is made by the store with the caller as the audit trail's actor (its key's id and
client address), in the change's own transaction. The trail is read by an admin (every row) and by
a tenant-admin key (its tenant's rows only); an inference key reads none.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Collection
from typing import Any

import msgspec

from gateway.accounts.audit import Actor, AuditQuery, AuditTrail
from gateway.accounts.ledger import ReportQuery, cost_report
from gateway.accounts.tenants import (
    NO_LIMITS,
    OPEN_MODE_KEY_ID,
    TENANT,
    TENANT_ADMIN,
    Authenticator,
    Caller,
    KeyInfo,
    KeyLimits,
    NewKey,
    Tenant,
    TenantStore,
    check_not_read_only,
    check_tiers,
    checked_limits,
)
from gateway.errors import NotFound, PermissionDenied
from gateway.ops.clients import CLIENT_HOST


def actor_of(caller: Caller) -> Actor:
    """The audit trail's actor for a request's caller: the person, or its key's id; and the client's
    address."""
    if caller.person:  # signed in through single sign-on: the person, never a token
        return Actor.of_person(caller.person, CLIENT_HOST.get())
    return Actor.of_key(caller.key_id, CLIENT_HOST.get())


class AdminService:
    def __init__(
        self,
        store: TenantStore,
        auth: Authenticator,
        tiers: Collection[str] = (),
        trail: AuditTrail | None = None,
    ) -> None:
        """``tiers``: this gateway's tier names, which a key's ``tiers`` must name (none: unchecked)."""
        self._store = store
        self._trail = trail or AuditTrail(store.engine)
        self._auth = auth
        self._tiers = tuple(tiers)

    def _limits(self, changes: dict[str, Any], base: KeyLimits = NO_LIMITS) -> KeyLimits:
        limits = checked_limits(changes, base)
        return check_tiers(limits, self._tiers) if self._tiers and "tiers" in changes else limits

    def _visible(self, caller: Caller, tenant: str) -> None:
        if not caller.may_see(tenant):
            raise NotFound(f"no tenant named {tenant!r}")

    def _manages_keys(self, caller: Caller, tenant: str) -> None:
        self._visible(caller, tenant)
        if caller.may_manage_keys(tenant):
            return
        if caller.key_id == OPEN_MODE_KEY_ID:
            raise PermissionDenied(
                "open mode (auth.open_mode) manages no keys: turn it off and use an admin key, "
                "or run `tiergate keys create` on the gateway's machine"
            )
        raise PermissionDenied(
            "keys are managed with an admin key or a tenant-admin key, not an inference key"
        )

    async def tenants(self, caller: Caller) -> list[Tenant]:
        if caller.sees_all:
            return await asyncio.to_thread(self._store.list_tenants)
        found = []
        for name in caller.tenant_names:
            try:
                found.append(await asyncio.to_thread(self._store.tenant, name))
            except NotFound:  # a group names a tenant not (or no longer) there
                continue
        return found

    async def tenant(self, caller: Caller, name: str) -> Tenant:
        self._visible(caller, name)
        return await asyncio.to_thread(self._store.tenant, name)

    async def create_tenant(self, caller: Caller, name: str, limits: dict[str, int] | None) -> Tenant:
        check_not_read_only(caller)
        if not caller.is_admin:
            raise PermissionDenied("only an admin key can create tenants")
        return await asyncio.to_thread(
            functools.partial(self._store.create_tenant, actor=actor_of(caller)), name, limits
        )

    async def keys(self, caller: Caller, tenant: str) -> list[KeyInfo]:
        if caller.read_only:  # a viewer lists every tenant's keys
            self._visible(caller, tenant)
            return await asyncio.to_thread(self._store.list_keys, tenant)
        self._manages_keys(caller, tenant)
        return await asyncio.to_thread(self._store.list_keys, tenant)

    async def all_keys(self, caller: Caller) -> list[KeyInfo]:
        """Every key (an admin, a viewer), or the caller's tenants' (a tenant admin)."""
        if caller.sees_all:
            return await asyncio.to_thread(self._store.list_keys, None)
        return [key for name in caller.tenant_names for key in await self.keys(caller, name)]

    async def create_key(
        self,
        caller: Caller,
        tenant: str,
        name: str,
        role: str = TENANT,
        limits: dict[str, Any] | None = None,
    ) -> NewKey:
        """``limits``: the key's own (field → value as the API takes it); an admin key only."""
        check_not_read_only(caller)
        self._manages_keys(caller, tenant)
        if role == TENANT_ADMIN and not caller.is_admin:
            raise PermissionDenied("only an admin key creates tenant-admin keys")
        own = self._limits(limits or {})
        if own != NO_LIMITS and not caller.is_admin:
            raise PermissionDenied("only an admin key sets a key's limits")
        create = functools.partial(self._store.create_key, actor=actor_of(caller))
        return await asyncio.to_thread(create, tenant, name, role, own)

    async def key(self, caller: Caller, key_id: str) -> KeyInfo:
        key = await asyncio.to_thread(self._store.key, key_id)
        if not caller.sees_all and (key.tenant is None or not caller.may_see(key.tenant)):
            raise NotFound(f"no key with id {key_id!r}")
        if key.tenant is not None and not caller.read_only:
            self._manages_keys(caller, key.tenant)
        return key

    async def update_key(self, caller: Caller, key_id: str, changes: dict[str, Any]) -> KeyInfo:
        """Change a key's own limits (the fields given; the others stay): an admin key only."""
        check_not_read_only(caller)
        key = await self.key(caller, key_id)
        if not caller.is_admin:
            raise PermissionDenied("only an admin key changes a key's limits")
        update = functools.partial(self._store.update_key, actor=actor_of(caller))
        updated = await asyncio.to_thread(update, key_id, self._limits(changes, key.limits))
        self._auth.forget(key_id)
        return updated

    async def rotate_key(self, caller: Caller, key_id: str, overlap_hours: float) -> NewKey:
        """A new secret for the key; the old one works ``overlap_hours`` more: an admin key only."""
        check_not_read_only(caller)
        await self.key(caller, key_id)
        if not caller.is_admin:
            raise PermissionDenied("only an admin key rotates keys")
        rotate = functools.partial(self._store.rotate_key, actor=actor_of(caller))
        rotated = await asyncio.to_thread(rotate, key_id, overlap_hours * 3600)
        self._auth.forget(key_id)
        return rotated

    async def revoke_key(self, caller: Caller, key_id: str) -> KeyInfo:
        check_not_read_only(caller)
        await self.key(caller, key_id)
        revoked = await asyncio.to_thread(
            functools.partial(self._store.revoke_key, actor=actor_of(caller)), key_id
        )
        self._auth.forget(key_id)
        return revoked

    async def cost_report(
        self,
        caller: Caller,
        tenant: str | None,
        since: str | None,
        until: str | None,
        group_by: str | None,
        tag: str | None = None,
    ) -> dict[str, Any]:
        """``tag``: only rows carrying it (``team=search``); ``group_by`` may name ``tag:<key>``."""
        if not caller.sees_all:
            tenant = tenant or caller.tenant_names[0]
        query = ReportQuery.parse(tenant, since, until, group_by, tag)
        if not caller.sees_all and "tenant" in query.group_by:
            raise PermissionDenied("only an admin key can group costs by tenant")
        tenant_id = None
        if query.tenant is not None:
            tenant_id = (await self.tenant(caller, query.tenant)).id
        return await asyncio.to_thread(cost_report, self._store.engine, query, tenant_id)

    async def audit(self, caller: Caller, query: AuditQuery) -> dict[str, Any]:
        """A page of the audit trail: every row for an admin or a viewer, its tenants' for a tenant admin."""
        mine = audit_scope(caller)
        scope = query.tenants if mine is None else mine & (query.tenants or mine)
        scoped = msgspec.structs.replace(query, tenants=scope)
        return await asyncio.to_thread(self._trail.page, scoped)


def audit_scope(caller: Caller) -> frozenset[str] | None:
    """The tenants whose audit rows ``caller`` may read (None: every row, tenant-less ones too); 403
    for a caller that reads none. The one place a principal's tenant scope meets the trail."""
    if caller.sees_all:  # an admin, or a person with the viewer role
        return None
    if caller.role == TENANT_ADMIN and caller.tenant_names:  # a tenant-admin key, or a person
        return frozenset(caller.tenant_names)
    raise PermissionDenied("the audit trail is read with an admin key or a tenant-admin key")
