"""Tenant policies in the database, with every version kept (blocking; call from a thread).

Each change writes the tenant's new current policy and a version row (who, when, the policy
before and after) in one transaction.  A rollback is a change too: it sets an earlier
version's policy as a new version, so history only grows.  The key ``*`` holds an edited
default policy for tenants without one of their own (else the configured default applies).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

import msgspec
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import IntegrityError

import router
from gateway.accounts.audit import SYSTEM_ACTOR, Actor, Event, append
from gateway.accounts.storage import policy_versions, tenant_policies
from gateway.errors import Conflict, NotFound, to_gateway_error

DEFAULT_KEY = "*"


class PolicyRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The policy a tenant is routed by now, and where it came from."""

    tenant: str
    policy: router.TenantPolicy
    # "tenant": its own; "default": the edited default ("*"); "configured": router.default_policy.
    source: str
    version: int = 0  # 0: never set
    updated_at: float | None = None
    updated_by: str | None = None


class PolicyChange(msgspec.Struct, frozen=True, kw_only=True):
    tenant: str
    version: int
    action: str  # "set" | "rollback"
    changed_by: str
    changed_at: float
    before: router.TenantPolicy | None
    after: router.TenantPolicy


_encode = msgspec.json.Encoder().encode


def _decode(text: str | None) -> router.TenantPolicy | None:
    return None if text is None else router.decode_policy(text)


class PolicyStore:
    def __init__(
        self, engine: Engine, configured_default: router.TenantPolicy, tiers: Collection[str]
    ) -> None:
        self.engine = engine
        self.configured_default = configured_default
        self.tiers = frozenset(tiers)

    def current(self) -> dict[str, tuple[int, router.TenantPolicy]]:
        """Every stored current policy: tenant → (version, policy)."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(tenant_policies)).all()
        out = {}
        for row in rows:
            policy = _decode(row.policy)
            assert policy is not None
            out[row.tenant] = (row.version, policy)
        return out

    def stamp(self) -> int:
        """Grows with every change to any policy: a cheap check for another instance's edits."""
        with self.engine.connect() as conn:
            return int(conn.execute(select(func.max(policy_versions.c.id))).scalar() or 0)

    def get(self, tenant: str) -> PolicyRecord:
        """The tenant's own policy, else the edited default, else the configured default."""
        with self.engine.connect() as conn:
            rows = {
                r.tenant: r
                for r in conn.execute(
                    select(tenant_policies).where(tenant_policies.c.tenant.in_([tenant, DEFAULT_KEY]))
                )
            }
        own = "default" if tenant == DEFAULT_KEY else "tenant"
        for key, source in ((tenant, own), (DEFAULT_KEY, "default")):
            row = rows.get(key)
            if row is not None:
                policy = _decode(row.policy)
                assert policy is not None
                version = row.version if key == tenant else 0  # a tenant on the default has none
                return PolicyRecord(
                    tenant=tenant,
                    policy=policy,
                    source=source,
                    version=version,
                    updated_at=row.updated_at,
                    updated_by=row.updated_by,
                )
        return PolicyRecord(tenant=tenant, policy=self.configured_default, source="configured")

    def check(self, policy: router.TenantPolicy) -> router.TenantPolicy:
        try:
            return router.check_policy(policy, self.tiers)
        except router.PolicyInvalid as exc:
            raise to_gateway_error(exc) from exc

    def set(
        self,
        tenant: str,
        policy: router.TenantPolicy,
        who: str,
        *,
        expected_version: int | None = None,
        action: str = "set",
        actor: Actor = SYSTEM_ACTOR,
    ) -> PolicyRecord:
        """Make ``policy`` the tenant's; ``expected_version`` (the version the editor saw)
        refuses the change with 409 if someone changed it since. ``who`` is the history's
        ``changed_by``; ``actor`` the audit trail's (one row, in the same transaction)."""
        self.check(policy)
        now = time.time()
        after = _encode(policy).decode()
        try:
            with self.engine.begin() as conn:
                row = conn.execute(select(tenant_policies).where(tenant_policies.c.tenant == tenant)).first()
                version = 0 if row is None else row.version
                if expected_version is not None and expected_version != version:
                    raise Conflict(
                        f"the policy of {tenant!r} is at version {version}, not {expected_version}: "
                        "someone changed it; reload and edit again",
                        param="version",
                    )
                values: dict[str, Any] = dict(
                    version=version + 1, policy=after, updated_at=now, updated_by=who
                )
                if row is None:
                    conn.execute(tenant_policies.insert().values(tenant=tenant, **values))
                else:
                    conn.execute(
                        tenant_policies.update()
                        .where(tenant_policies.c.tenant == tenant, tenant_policies.c.version == version)
                        .values(**values)
                    )
                conn.execute(
                    policy_versions.insert().values(
                        tenant=tenant,
                        version=version + 1,
                        action=action,
                        before=None if row is None else row.policy,
                        after=after,
                        changed_by=who,
                        changed_at=now,
                    )
                )
                append(
                    conn,
                    Event(
                        actor=actor,
                        action="policy.rolled_back" if action == "rollback" else "policy.set",
                        object_type="policy",
                        object_id=tenant,
                        tenant=None if tenant == DEFAULT_KEY else tenant,
                        before=None if row is None else {"version": version, "policy": _decode(row.policy)},
                        after={"version": version + 1, "policy": policy},
                    ),
                )
        except IntegrityError as exc:  # another writer took the same version number first
            raise Conflict(f"the policy of {tenant!r} changed meanwhile; try again", param="version") from exc
        return self.get(tenant)

    def history(self, tenant: str, limit: int = 100) -> list[PolicyChange]:
        """The tenant's changes, newest first."""
        query = (
            select(policy_versions)
            .where(policy_versions.c.tenant == tenant)
            .order_by(policy_versions.c.version.desc())
            .limit(limit)
        )
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        out = []
        for r in rows:
            after = _decode(r.after)
            assert after is not None
            out.append(
                PolicyChange(
                    tenant=r.tenant,
                    version=r.version,
                    action=r.action,
                    changed_by=r.changed_by,
                    changed_at=r.changed_at,
                    before=_decode(r.before),
                    after=after,
                )
            )
        return out

    def rollback(
        self, tenant: str, to_version: int, who: str, *, actor: Actor = SYSTEM_ACTOR
    ) -> PolicyRecord:
        """Set the policy of an earlier version again (as a new version)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(policy_versions.c.after).where(
                    policy_versions.c.tenant == tenant, policy_versions.c.version == to_version
                )
            ).first()
        if row is None:
            raise NotFound(f"the policy of {tenant!r} has no version {to_version}", param="version")
        policy = _decode(row.after)
        assert policy is not None
        return self.set(tenant, policy, who, action="rollback", actor=actor)
