"""Tenants and their keys: list and create tenants, create keys (shown once), set a key's own limits,
rotate (the new key shown once) and revoke them; and the audit trail of every change, filtered by
person, object and time (an admin sees every row, a tenant admin its tenants')."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from admin_ui._context import UI, page, services
from admin_ui._guard import AnyRequest, Operator, checked_form, operator
from gateway.accounts.admin import AdminService
from gateway.accounts.audit import AuditQuery
from gateway.accounts.tenants import KeyLimits, TenantLimits, check_tenant_name
from gateway.errors import GatewayError, InvalidRequest, PermissionDenied

LIMIT_FIELDS = tuple(TenantLimits.__struct_fields__)
KEY_LIMIT_FIELDS = tuple(KeyLimits.__struct_fields__)


def _admin(request: AnyRequest) -> AdminService:
    return services(request).admin


async def _tenants_page(
    request: AnyRequest,
    op: Operator,
    *,
    errors: dict[str, str] | None = None,
    values: dict[str, str] | None = None,
) -> Template:
    tenants = await _admin(request).tenants(op.caller)
    return page(
        op,
        "tenants.html",
        title="Tenants",
        nav="tenants",
        tenants=tenants,
        limit_fields=LIMIT_FIELDS,
        errors=errors or {},
        values=values or {},
        status=400 if errors else 200,
    )


@get("/tenants", name="admin_ui:tenants")
async def tenants_page(request: AnyRequest, ui: NamedDependency[UI]) -> Template:
    return await _tenants_page(request, await operator(request, ui.sessions))


def _limits(fields: dict[str, str], errors: dict[str, str]) -> dict[str, int]:
    limits: dict[str, int] = {}
    for name in LIMIT_FIELDS:
        text = fields.get(name, "").strip()
        if not text:
            continue
        if not text.isdigit():
            errors[name] = "a whole number, 0 or more (0: no limit); leave empty for the default"
            continue
        limits[name] = int(text)
    return limits


@post("/tenants", name="admin_ui:create_tenant")
async def create_tenant(request: AnyRequest, ui: NamedDependency[UI]) -> Template | Redirect:
    op = await operator(request, ui.sessions)
    fields = await checked_form(request, op.csrf)
    errors: dict[str, str] = {}
    name = fields.get("name", "").strip()
    try:
        check_tenant_name(name)
    except GatewayError as exc:
        errors["name"] = "a name is required" if not name else exc.message
    limits = _limits(fields, errors)
    if not errors:
        try:
            await _admin(request).create_tenant(op.caller, name, limits or None)
        except PermissionDenied:  # not a form error: refused (a viewer, another tenant's admin)
            raise
        except GatewayError as exc:
            errors[(exc.param or "name").removeprefix("limits.")] = exc.message
    if errors:
        return await _tenants_page(request, op, errors=errors, values=fields)
    return Redirect(f"/admin/tenants/{name}", status_code=303)


async def _tenant_page(request: AnyRequest, op: Operator, name: str, **extra: Any) -> Template:
    admin = _admin(request)
    tenant = await admin.tenant(op.caller, name)
    keys = await admin.keys(op.caller, name)
    return page(
        op,
        "tenant.html",
        title=f"Tenant {name}",
        nav="tenants",
        tenant=tenant,
        keys=keys,
        limit_fields=LIMIT_FIELDS,
        key_limit_fields=KEY_LIMIT_FIELDS,
        now=time.time(),
        **({"new_key": None, "error": ""} | extra),
    )


@get("/tenants/{name:str}", name="admin_ui:tenant")
async def tenant_page(request: AnyRequest, ui: NamedDependency[UI], name: FromPath[str]) -> Template:
    return await _tenant_page(request, await operator(request, ui.sessions), name)


@post("/tenants/{name:str}/keys", name="admin_ui:create_key")
async def create_key(request: AnyRequest, ui: NamedDependency[UI], name: FromPath[str]) -> Template:
    op = await operator(request, ui.sessions)
    fields = await checked_form(request, op.csrf)
    label = fields.get("label", "").strip()[:200]
    new_key = await _admin(request).create_key(op.caller, name, label)
    # The key is in this answer only: it is never stored, and the page says so.
    return await _tenant_page(request, op, name, new_key=new_key, status=201)


@post("/keys/{key_id:str}/revoke", name="admin_ui:revoke_key")
async def revoke_key(request: AnyRequest, ui: NamedDependency[UI], key_id: FromPath[str]) -> Redirect:
    op = await operator(request, ui.sessions)
    await checked_form(request, op.csrf)
    key = await _admin(request).revoke_key(op.caller, key_id)
    ui.sessions.close_key(key_id)
    back = f"/admin/tenants/{key.tenant}" if key.tenant else "/admin/tenants"
    return Redirect(back, status_code=303)


def _key_limit_changes(fields: dict[str, str]) -> dict[str, Any]:
    """The form's limits as the admin API takes them: an empty field is none of its own."""
    changes: dict[str, Any] = {}
    for name in KEY_LIMIT_FIELDS:
        text = fields.get(name, "").strip()
        if name in ("tiers", "models", "expires_at"):
            changes[name] = text or None
        elif not text:
            changes[name] = None
        else:
            try:
                changes[name] = float(text) if name.startswith("budget_") else int(text)
            except ValueError:
                changes[name] = text  # refused by the check, naming the field
    return changes


@post("/keys/{key_id:str}/limits", name="admin_ui:key_limits")
async def key_limits(
    request: AnyRequest, ui: NamedDependency[UI], key_id: FromPath[str]
) -> Template | Redirect:
    op = await operator(request, ui.sessions)
    fields = await checked_form(request, op.csrf)
    admin = _admin(request)
    key = await admin.key(op.caller, key_id)
    try:
        await admin.update_key(op.caller, key_id, _key_limit_changes(fields))
    except PermissionDenied:  # not a form error: refused (a viewer, another tenant's admin)
        raise
    except GatewayError as exc:
        return await _tenant_page(
            request, op, key.tenant or "", error=f"key {key_id}: {exc.message}", status=400
        )
    return Redirect(f"/admin/tenants/{key.tenant}", status_code=303)


@post("/keys/{key_id:str}/rotate", name="admin_ui:rotate_key")
async def rotate_key(request: AnyRequest, ui: NamedDependency[UI], key_id: FromPath[str]) -> Template:
    op = await operator(request, ui.sessions)
    fields = await checked_form(request, op.csrf)
    admin = _admin(request)
    key = await admin.key(op.caller, key_id)
    try:
        hours = float(fields.get("overlap_hours", "0") or 0)
        rotated = await admin.rotate_key(op.caller, key_id, hours)
    except PermissionDenied:  # not a form error: refused (a viewer, another tenant's admin)
        raise
    except (ValueError, GatewayError) as exc:
        message = exc.message if isinstance(exc, GatewayError) else "overlap hours: a number"
        return await _tenant_page(request, op, key.tenant or "", error=f"key {key_id}: {message}", status=400)
    return await _tenant_page(request, op, key.tenant or "", new_key=rotated, status=201)


# What the audit page's object filter offers (the object types the trail records).
AUDIT_OBJECTS = ("tenant", "key", "policy", "price", "tier", "replica", "edge_model", "settings", "session")
AUDIT_PAGE = 50


@get("/audit", name="admin_ui:audit")
async def audit_page(
    request: AnyRequest,
    ui: NamedDependency[UI],
    actor: FromQuery[str | None] = None,
    object_type: FromQuery[str | None] = None,
    object_id: FromQuery[str | None] = None,
    tenant: FromQuery[str | None] = None,
    since: FromQuery[str | None] = None,
    until: FromQuery[str | None] = None,
    after: FromQuery[str | None] = None,
) -> Template:
    """The trail, newest first, :data:`AUDIT_PAGE` rows a page; ``after``: the last row shown."""
    op = await operator(request, ui.sessions)
    admin = _admin(request)
    q = {
        "actor": (actor or "").strip(),
        "object_type": (object_type or "").strip(),
        "object_id": (object_id or "").strip(),
        "tenant": (tenant or "").strip(),
        "since": (since or "").strip(),
        "until": (until or "").strip(),
    }
    errors: dict[str, str] = {}
    found: dict[str, Any] = {"data": [], "has_more": False, "last_id": None}
    try:
        if after is not None and not after.isdigit():
            raise InvalidRequest("after must be a row number", param="after")
        query = AuditQuery(
            actor=q["actor"] or None,
            object_type=q["object_type"] or None,
            object_id=q["object_id"] or None,
            tenants=frozenset({q["tenant"]}) if q["tenant"] else None,
            since=q["since"] or None,
            until=q["until"] or None,
            limit=AUDIT_PAGE,
            after=int(after) if after else None,
        )
        found = await admin.audit(op.caller, query)
    except GatewayError as exc:
        errors[exc.param or "form"] = exc.message
    more = {k: v for k, v in q.items() if v} | {"after": str(found["last_id"])}
    return page(
        op,
        "audit.html",
        title="Audit trail",
        nav="audit",
        q=q,
        rows=found["data"],
        older=urlencode(more) if found["has_more"] else "",
        objects=AUDIT_OBJECTS,
        tenants=await admin.tenants(op.caller),
        errors=errors,
        status=400 if errors else 200,
    )


TENANT_ROUTES = [
    tenants_page,
    create_tenant,
    tenant_page,
    create_key,
    key_limits,
    rotate_key,
    revoke_key,
    audit_page,
]
