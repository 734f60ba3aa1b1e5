"""Tenants and keys in the database (blocking; call from a thread when on the event loop)."""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

import msgspec
from sqlalchemy import Engine, Row, select
from sqlalchemy.exc import IntegrityError

from gateway.accounts.storage import api_keys, tenants
from gateway.accounts.tenants._keys import new_key
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


class TenantStore:
    def __init__(self, engine: Engine, default_limits: TenantLimits) -> None:
        self.engine = engine
        self._default = default_limits

    # -- tenants -------------------------------------------------------------

    def create_tenant(self, name: str, limits: dict[str, int] | None = None) -> Tenant:
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
        except IntegrityError as exc:
            raise Conflict(f"tenant {name!r} already exists", param="name") from exc
        return self.tenant(name)

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

    def create_key(self, tenant_name: str | None, name: str = "", role: str = TENANT) -> NewKey:
        """A key for ``tenant_name`` with ``role`` (tenant or tenant-admin), or an admin key when
        ``tenant_name`` is None."""
        check_key_name(name)
        if tenant_name is not None and role not in TENANT_ROLES:
            raise InvalidRequest(f"role must be one of {', '.join(TENANT_ROLES)}", param="role")
        tenant_id = None if tenant_name is None else self.tenant(tenant_name).id
        role = ADMIN if tenant_name is None else role
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
                )
            )
        return NewKey(id=key_id, tenant=tenant_name, role=role, name=name, key=key)

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

    def revoke_key(self, key_id: str) -> KeyInfo:
        with self.engine.begin() as conn:
            conn.execute(
                api_keys.update()
                .where(api_keys.c.id == key_id, api_keys.c.revoked_at.is_(None))
                .values(revoked_at=time.time())
            )
        return self.key(key_id)

    def lookup(self, key_id: str) -> tuple[str, str, Tenant | None, bool] | None:
        """(hash, role, tenant, revoked) of a key, for authentication."""
        with self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.id == key_id)).first()
            if row is None:
                return None
            tenant = None
            if row.tenant_id is not None:
                trow = conn.execute(select(tenants).where(tenants.c.id == row.tenant_id)).first()
                tenant = None if trow is None else self._tenant(trow)
        return row.key_hash, row.role, tenant, row.revoked_at is not None

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


def _key_info(row: Row[Any]) -> KeyInfo:
    return KeyInfo(
        id=row.id,
        tenant=row.tenant,
        role=row.role,
        name=row.name,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )
