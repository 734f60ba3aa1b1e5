"""The admin JSON API under ``/admin/api``: thin handlers over :class:`AdminService`."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from litestar import Request, Response, delete, get, patch, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery

from gateway.accounts.admin import AdminService
from gateway.accounts.audit import AuditQuery
from gateway.accounts.ledger import FORMATS, report_csv
from gateway.accounts.tenants import TENANT, Caller
from gateway.errors import InvalidRequest
from gateway.services import Services
from gateway.wire.chat import encode

JSON = "application/json"


class NewTenantBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    limits: dict[str, int] | None = None


class NewKeyBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str = ""
    role: str = TENANT  # or "tenant-admin" (an admin key only)
    # The key's own limits (an admin key only), as PATCH /admin/api/keys/{id} takes them.
    limits: dict[str, Any] | None = None


class NewKeyAnyTenantBody(NewKeyBody, forbid_unknown_fields=True):
    tenant: str = ""


class RotateBody(msgspec.Struct, forbid_unknown_fields=True):
    overlap_hours: float = 0.0  # how long the old secret keeps working (0.25: 15 minutes)


T = TypeVar("T")


def _decode(body: bytes, kind: type[T]) -> T:
    try:
        return msgspec.json.decode(body or b"{}", type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequest(f"invalid request body: {exc}") from exc
    except RecursionError as exc:
        raise InvalidRequest("invalid request body: its JSON is nested too deeply") from exc


async def _admin(request: Request[object, object, State], services: Services) -> tuple[AdminService, Caller]:
    caller = await services.auth.caller(request.headers)
    return services.admin, caller


def _json(value: object, status: int = 200) -> Response[bytes]:
    return Response(encode(value), media_type=JSON, status_code=status)


@get("/admin/api/tenants")
async def list_tenants(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    return _json({"data": await admin.tenants(caller)})


@post("/admin/api/tenants")
async def create_tenant(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    body = _decode(await request.body(), NewTenantBody)
    return _json(await admin.create_tenant(caller, body.name, body.limits), 201)


@get("/admin/api/tenants/{name:str}")
async def get_tenant(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    return _json(await admin.tenant(caller, name))


@get("/admin/api/tenants/{name:str}/keys")
async def list_keys(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    return _json({"data": await admin.keys(caller, name)})


@post("/admin/api/tenants/{name:str}/keys")
async def create_key(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    body = _decode(await request.body(), NewKeyBody)
    return _json(await admin.create_key(caller, name, body.name, body.role, body.limits), 201)


@get("/admin/api/keys")
async def list_all_keys(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    """Every key with its limits, expiry and last use (a tenant-admin key: its tenant's)."""
    admin, caller = await _admin(request, services)
    return _json({"data": await admin.all_keys(caller)})


@post("/admin/api/keys")
async def create_any_key(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    """``{"tenant": T, "name", "role", "limits": {budget_day_usd, budget_month_usd, tiers, models,
    expires_at, requests_per_min, tokens_per_min}}``."""
    admin, caller = await _admin(request, services)
    body = _decode(await request.body(), NewKeyAnyTenantBody)
    if not body.tenant:
        raise InvalidRequest("name the key's tenant", param="tenant")
    return _json(await admin.create_key(caller, body.tenant, body.name, body.role, body.limits), 201)


@get("/admin/api/keys/{key_id:str}")
async def get_key(
    request: Request[object, object, State], services: NamedDependency[Services], key_id: FromPath[str]
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    return _json(await admin.key(caller, key_id))


@patch("/admin/api/keys/{key_id:str}")
async def update_key(
    request: Request[object, object, State], services: NamedDependency[Services], key_id: FromPath[str]
) -> Response[bytes]:
    """The limits given change (0, an empty list or null: none of its own); the others stay."""
    admin, caller = await _admin(request, services)
    changes = _decode(await request.body(), dict[str, Any])
    return _json(await admin.update_key(caller, key_id, changes))


@post("/admin/api/keys/{key_id:str}/rotate")
async def rotate_key(
    request: Request[object, object, State], services: NamedDependency[Services], key_id: FromPath[str]
) -> Response[bytes]:
    """The new key, shown this once; the old one works ``overlap_hours`` more."""
    admin, caller = await _admin(request, services)
    body = _decode(await request.body(), RotateBody)
    return _json(await admin.rotate_key(caller, key_id, body.overlap_hours), 201)


@delete("/admin/api/keys/{key_id:str}", status_code=200)
async def revoke_key(
    request: Request[object, object, State], services: NamedDependency[Services], key_id: FromPath[str]
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    return _json(await admin.revoke_key(caller, key_id))


@get("/admin/api/reports/costs")
async def cost_report(
    request: Request[object, object, State],
    services: NamedDependency[Services],
    tenant: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    group_by: FromQuery[str | None] = None,
    tag: FromQuery[str | None] = None,
    format: FromQuery[str] = "json",
) -> Response[bytes]:
    admin, caller = await _admin(request, services)
    if format not in FORMATS:
        raise InvalidRequest(f"format must be one of {', '.join(FORMATS)}", param="format")
    report = await admin.cost_report(caller, tenant, since, until, group_by, tag)
    if format == "csv":
        return Response(report_csv(report).encode(), media_type="text/csv; charset=utf-8")
    return _json(report)


@get("/admin/api/audit")
async def audit_trail(
    request: Request[object, object, State],
    services: NamedDependency[Services],
    actor: FromQuery[str | None] = None,
    object_type: FromQuery[str | None] = None,
    object_id: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    limit: FromQuery[int] = 100,
    after: FromQuery[int | None] = None,
) -> Response[bytes]:
    """The audit trail, newest first, a page at a time (``after``: the ``last_id`` of the page before);
    an admin reads every row, a tenant-admin key its tenant's."""
    admin, caller = await _admin(request, services)
    query = AuditQuery(
        actor=actor,
        object_type=object_type,
        object_id=object_id,
        since=since,
        until=until,
        tenants=None if tenant is None else frozenset({tenant}),
        limit=limit,
        after=after,
    )
    return _json(await admin.audit(caller, query))


ADMIN_ROUTES = [
    list_tenants,
    create_tenant,
    get_tenant,
    list_keys,
    create_key,
    list_all_keys,
    create_any_key,
    get_key,
    update_key,
    rotate_key,
    revoke_key,
    cost_report,
    audit_trail,
]
