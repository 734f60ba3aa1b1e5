"""Tenants and keys in the database (blocking; call from a thread when on the event loop)."""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from typing import Any

import msgspec
from sqlalchemy import Connection, Engine, Row, select
from sqlalchemy.exc import IntegrityError

from gateway.accounts.audit import SYSTEM_ACTOR, Actor, Event, append
from gateway.accounts.storage import api_keys, tenants
from gateway.accounts.tenants._keylimits import NO_LIMITS, KeyLimits, from_row, to_row
from gateway.accounts.tenants._keys import hash_key, new_key
from gateway.accounts.tenants._models import (
    ADMIN,
    DEFAULT_TENANT,
    TENANT,
    TENANT_ROLES,
    KeyInfo,
    NewKey,
    Tenant,
)
from gateway.accounts.tenants._settings import TenantLimits
from gateway.errors import Conflict, InvalidRequest, NotFound

_NAME = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,63}")
_LIMIT_FIELDS = tuple(TenantLimits.__struct_fields__)
MAX_KEY_NAME = 128  # api_keys.name's width
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_tenant_name(name: str) -> None:
    if not _NAME.fullmatch(name):
        raise InvalidRequest(
            f"invalid tenant name {name!r}: use 1-64 of a-z, 0-9, '_', '.', '-'", param="name"
        )


def check_key_name(name: str) -> None:
    """A key's label fits its column and holds no control characters (PostgreSQL refuses NUL)."""
    if len(name) > MAX_KEY_NAME or _CONTROL.search(name):
        raise InvalidRequest(
            f"invalid key name: use at most {MAX_KEY_NAME} characters and no control characters",
            param="name",
        )


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A key as authentication reads it (its hashes; never the key)."""

    key_hash: str
    role: str
    tenant: Tenant | None
    revoked: bool
    limits: KeyLimits
    previous_hash: str | None  # a rotated key's old secret, taken until previous_until
    previous_until: float | None


class TenantStore:
    def __init__(self, engine: Engine, default_limits: TenantLimits) -> None:
        self.engine = engine
        self._default = default_limits

    # -- tenants -------------------------------------------------------------

    def create_tenant(
        self, name: str, limits: dict[str, int] | None = None, *, actor: Actor = SYSTEM_ACTOR
    ) -> Tenant:
        check_tenant_name(name)
        unknown = set(limits or {}) - set(_LIMIT_FIELDS)
        if unknown:
            raise InvalidRequest(f"unknown limits: {', '.join(sorted(unknown))}", param="limits")
        for field, value in (limits or {}).items():
            if not isinstance(value, int) or value < 0:
                raise InvalidRequest(f"limit {field} must be an integer >= 0", param=f"limits.{field}")
        try:
            with self.engine.begin() as conn:
                conn.execute(tenants.insert().values(name=name, created_at=time.time(), **(limits or {})))
                row = conn.execute(select(tenants).where(tenants.c.name == name)).one()
                created = self._tenant(row)
                append(conn, _event(actor, "tenant.created", "tenant", name, name, None, created))
        except IntegrityError as exc:
            raise Conflict(f"tenant {name!r} already exists", param="name") from exc
        return created

    def tenant(self, name: str) -> Tenant:
        with self.engine.connect() as conn:
            row = conn.execute(select(tenants).where(tenants.c.name == name)).first()
        if row is None:
            raise NotFound(f"no tenant named {name!r}")
        return self._tenant(row)

    def list_tenants(self) -> list[Tenant]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(tenants).order_by(tenants.c.name)).all()
        return [self._tenant(row) for row in rows]

    def _tenant(self, row: Row[Any]) -> Tenant:
        own = {f: getattr(row, f) for f in _LIMIT_FIELDS if getattr(row, f) is not None}
        limits = msgspec.structs.replace(self._default, **own)
        return Tenant(id=row.id, name=row.name, created_at=row.created_at, limits=limits)

    # -- keys ----------------------------------------------------------------

    def create_key(
        self,
        tenant_name: str | None,
        name: str = "",
        role: str = TENANT,
        limits: KeyLimits = NO_LIMITS,
        *,
        actor: Actor = SYSTEM_ACTOR,
    ) -> NewKey:
        """A key for ``tenant_name`` with ``role`` (tenant or tenant-admin) and its own ``limits``, or
        an admin key when ``tenant_name`` is None (an admin key calls no model: no limits)."""
        check_key_name(name)
        if tenant_name is not None and role not in TENANT_ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(TENANT_ROLES)}", param="role")
        tenant_id = None if tenant_name is None else self.tenant(tenant_name).id
        role = ADMIN if tenant_name is None else role
        if tenant_name is None and limits != NO_LIMITS:
            raise InvalidRequest("an admin key calls no model: it takes no limits", param="limits")
        key_id, key, key_hash = new_key()
        with self.engine.begin() as conn:
            conn.execute(
                api_keys.insert().values(
                    id=key_id,
                    tenant_id=tenant_id,
                    role=role,
                    key_hash=key_hash,
                    name=name,
                    created_at=time.time(),
                    **to_row(limits),
                )
            )
            after = _key_in(conn, key_id)
            append(conn, _event(actor, "key.created", "key", key_id, tenant_name, None, after))
        return NewKey(id=key_id, tenant=tenant_name, role=role, name=name, key=key, limits=limits)

    def update_key(self, key_id: str, limits: KeyLimits, *, actor: Actor = SYSTEM_ACTOR) -> KeyInfo:
        """Replace a tenant key's limits (the caller merged the changes into its current ones)."""
        before = self.key(key_id)
        if before.tenant is None:
            raise InvalidRequest("an admin key calls no model: it takes no limits", param="limits")
        with self.engine.begin() as conn:
            conn.execute(api_keys.update().where(api_keys.c.id == key_id).values(**to_row(limits)))
            after = _key_in(conn, key_id)
            if after.limits != before.limits:  # nothing changed: no change to record
                append(conn, _event(actor, "key.limits_changed", "key", key_id, before.tenant, before, after))
        return after

    def rotate_key(
        self, key_id: str, overlap_s: float, now: float | None = None, *, actor: Actor = SYSTEM_ACTOR
    ) -> NewKey:
        """A new secret for the same key id (its limits, budget, ledger rows and name stay); the old
        secret keeps working for ``overlap_s`` seconds (0: not at all), then is a 401."""
        if overlap_s < 0:
            raise InvalidRequest("the overlap must be >= 0 hours", param="overlap_hours")
        info = self.key(key_id)
        if info.revoked_at is not None:
            raise Conflict(f"key {key_id!r} is revoked; create a new one")
        now = time.time() if now is None else now
        _, key, key_hash = new_key(key_id)
        with self.engine.begin() as conn:
            old = conn.execute(select(api_keys.c.key_hash).where(api_keys.c.id == key_id)).scalar_one()
            conn.execute(
                api_keys.update()
                .where(api_keys.c.id == key_id)
                .values(key_hash=key_hash, previous_hash=old, previous_until=now + overlap_s)
            )
            after = _key_in(conn, key_id)
            append(conn, _event(actor, "key.rotated", "key", key_id, info.tenant, info, after))
        assert hash_key(key) == key_hash
        return NewKey(
            id=key_id, tenant=info.tenant, role=info.role, name=info.name, key=key, limits=info.limits
        )

    def touch(self, used: dict[str, float]) -> None:
        """Write keys' last use (key id → epoch seconds), all in one transaction; never backwards."""
        if not used:
            return
        with self.engine.begin() as conn:
            for key_id, when in used.items():
                conn.execute(
                    api_keys.update()
                    .where(api_keys.c.id == key_id)
                    .where((api_keys.c.last_used.is_(None)) | (api_keys.c.last_used < when))
                    .values(last_used=when)
                )

    def list_keys(self, tenant_name: str | None = None) -> list[KeyInfo]:
        """Keys of one tenant, or every key (admin keys included) when ``tenant_name`` is None."""
        query = select(api_keys, tenants.c.name.label("tenant")).outerjoin(tenants)
        if tenant_name is not None:
            query = query.where(api_keys.c.tenant_id == self.tenant(tenant_name).id)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(api_keys.c.created_at)).all()
        return [_key_info(row) for row in rows]

    def key(self, key_id: str) -> KeyInfo:
        query = select(api_keys, tenants.c.name.label("tenant")).outerjoin(tenants)
        with self.engine.connect() as conn:
            row = conn.execute(query.where(api_keys.c.id == key_id)).first()
        if row is None:
            raise NotFound(f"no key with id {key_id!r}")
        return _key_info(row)

    def revoke_key(self, key_id: str, *, actor: Actor = SYSTEM_ACTOR) -> KeyInfo:
        before = self.key(key_id)
        with self.engine.begin() as conn:
            done = conn.execute(
                api_keys.update()
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=time.time())
            )
            after = _key_in(conn, key_id)
            if done.rowcount:  # revoking a revoked key changes nothing: no row
                append(conn, _event(actor, "key.revoked", "key", key_id, before.tenant, before, after))
        return after

    def lookup(self, key_id: str) -> KeyRecord | None:
        """What authentication needs of a key."""
        with self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).first()
            if row is None:
                return None
            tenant = None
            if row.tenant_id is not None:
                trow = conn.execute(select(tenants).where(tenants.c.id == row.tenant_id)).first()
                tenant = None if trow is None else self._tenant(trow)
        return KeyRecord(
            key_hash=row.key_hash,
            role=row.role,
            tenant=tenant,
            revoked=row.revoked_at is not None,
            limits=from_row(row),
            previous_hash=row.previous_hash,
            previous_until=row.previous_until,
        )

    # -- first run -----------------------------------------------------------

    def bootstrap(self) -> tuple[NewKey, NewKey] | None:
        """On a fresh database: an admin key, a ``default`` tenant and a key for it. None when
        an admin key exists already."""
        with self.engine.connect() as conn:
            has_admin = conn.execute(select(api_keys.c.id).where(api_keys.c.role == ADMIN)).first()
        if has_admin is not None:
            return None
        with contextlib.suppress(Conflict):
            self.create_tenant(DEFAULT_TENANT)
        return self.create_key(None, "bootstrap admin"), self.create_key(DEFAULT_TENANT, "bootstrap")


def _key_in(conn: Connection, key_id: str) -> KeyInfo:
    """A key as its transaction sees it (for the audit row's after)."""
    query = select(api_keys, tenants.c.name.label("tenant")).outerjoin(tenants)
    return _key_info(conn.execute(query.where(api_keys.c.id == key_id)).one())


def _event(
    actor: Actor, action: str, kind: str, object_id: str, tenant: str | None, before: Any, after: Any
) -> Event:
    return Event(
        actor=actor,
        action=action,
        object_type=kind,
        object_id=object_id,
        tenant=tenant,
        before=before,
        after=after,
    )


def _key_info(row: Row[Any]) -> KeyInfo:
    return KeyInfo(
        id=row.id,
        tenant=row.tenant,
        role=row.role,
        name=row.name,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        limits=from_row(row),
        last_used=row.last_used,
        previous_until=row.previous_until,
    )
