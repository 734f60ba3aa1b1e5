"""Routing policies: every tenant's at a glance, an editor per tenant (and for the default)
with messages next to the fields, the audit history (who, when, before → after), rollback.

Edits go through the gateway's :class:`~gateway.accounts.policies.PolicyBook`, so they take effect on
this gateway's next request (on other gateways within ``policies.refresh_s``).
"""

from __future__ import annotations

import asyncio
import re

from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from admin_ui import _policy_form as form
from admin_ui._context import UI, page, services
from admin_ui._guard import AnyRequest, Operator, checked_form, operator
from gateway.accounts.admin import actor_of
from gateway.accounts.policies import DEFAULT_KEY, PolicyBook, PolicyInvalid
from gateway.accounts.tenants import check_change, check_read
from gateway.errors import GatewayError, InvalidRequest

DEFAULT_SLUG = "_default"  # tenant names start with a letter or digit, so this names no tenant


def _key(slug: str) -> str:
    return DEFAULT_KEY if slug == DEFAULT_SLUG else slug


def _who(op: Operator) -> str:
    """How a change is attributed in the history: the person, or the role and key id."""
    return f"person:{op.caller.person}" if op.caller.person else f"{op.caller.role}:{op.caller.key_id}"


def _may_change(op: Operator, slug: str) -> None:
    key = _key(slug)
    check_change(op.caller, None if key == DEFAULT_KEY else key, "this policy is")


def _editable(op: Operator, slug: str) -> bool:
    try:
        _may_change(op, slug)
    except GatewayError:
        return False
    return True


def _clean(message: str) -> str:
    """msgspec's wording without the JSON path (the field is shown next to it anyway)."""
    message = message.removeprefix("invalid policy: ")
    return re.sub(r" - at `\$[^`]*`$", "", message)


def _tiers(request: AnyRequest) -> list[str]:
    return sorted(services(request).policies.store.tiers)


@get("/policies", name="admin_ui:policies")
async def policies_page(request: AnyRequest, ui: NamedDependency[UI]) -> Template:
    op = await operator(request, ui.sessions)
    running = services(request)
    book: PolicyBook = running.policies
    tenants = await running.admin.tenants(op.caller)  # a tenant admin: theirs only
    records = [await book.get(t.name) for t in tenants]
    default = await book.get(DEFAULT_KEY)
    return page(op, "policies.html", title="Policies", nav="policies", records=records, default=default)


async def _editor(
    request: AnyRequest,
    op: Operator,
    slug: str,
    *,
    values: dict[str, str] | None = None,
    errors: dict[str, str] | None = None,
    saved: bool = False,
    status: int = 200,
) -> Template:
    running = services(request)
    key = _key(slug)
    if key != DEFAULT_KEY:
        check_read(op.caller, key, "a tenant's policy is")
        await asyncio.to_thread(running.tenants.tenant, key)  # 404 for an unknown tenant
    book: PolicyBook = running.policies
    record = await book.get(key)
    history = await book.history(key, 50)
    baseline = book.store.configured_default if key == DEFAULT_KEY else (await book.get(DEFAULT_KEY)).policy
    tiers = _tiers(request)
    return page(
        op,
        "policy.html",
        title=f"Policy of {'the default' if key == DEFAULT_KEY else key}",
        nav="policies",
        slug=slug,
        is_default=key == DEFAULT_KEY,
        record=record,
        groups=form.fields(tiers),
        values=values if values is not None else form.flatten(record.policy),
        errors=errors or {},
        # A tenant's first version replaced the default policy it was routed by until then.
        history=[(change, form.changes(change.before or baseline, change.after)) for change in history],
        saved=saved,
        editable=_editable(op, slug),
        status=status,
    )


@get("/policies/{slug:str}", name="admin_ui:policy")
async def policy_page(
    request: AnyRequest, ui: NamedDependency[UI], slug: FromPath[str], saved: FromQuery[bool] = False
) -> Template:
    return await _editor(request, await operator(request, ui.sessions), slug, saved=saved)


@post("/policies/{slug:str}", name="admin_ui:save_policy")
async def save_policy(
    request: AnyRequest, ui: NamedDependency[UI], slug: FromPath[str]
) -> Template | Redirect:
    op = await operator(request, ui.sessions)
    posted = await checked_form(request, op.csrf)
    _may_change(op, slug)
    body, errors = form.parse(posted, _tiers(request))
    if not errors:
        try:
            policy = form.to_policy(body)
            version = posted.get("version", "")
            running = services(request)
            await running.policies.set(
                _key(slug),
                policy,
                _who(op),
                int(version) if version.isdigit() else None,
                actor=actor_of(op.caller),
            )
        except PolicyInvalid as exc:
            errors[exc.field or "form"] = _clean(exc.message)
        except GatewayError as exc:
            errors[exc.param or "form"] = _clean(exc.message)
    if errors:
        status = 409 if "version" in errors else 400
        known = {f.name for _, group in form.fields(_tiers(request)) for f in group}
        elsewhere = [message for name, message in errors.items() if name not in known]
        if elsewhere:
            errors["form"] = "; ".join(elsewhere)
        return await _editor(request, op, slug, values=posted, errors=errors, status=status)
    return Redirect(f"/admin/policies/{slug}?saved=true", status_code=303)


@post("/policies/{slug:str}/rollback", name="admin_ui:rollback_policy")
async def rollback_policy(
    request: AnyRequest, ui: NamedDependency[UI], slug: FromPath[str]
) -> Template | Redirect:
    op = await operator(request, ui.sessions)
    posted = await checked_form(request, op.csrf)
    _may_change(op, slug)
    running = services(request)
    version = posted.get("version", "")
    try:
        if not version.isdigit():
            raise InvalidRequest("choose a version to roll back to", param="version")
        await running.policies.rollback(_key(slug), int(version), _who(op), actor=actor_of(op.caller))
    except GatewayError as exc:
        return await _editor(request, op, slug, errors={"form": exc.message}, status=400)
    return Redirect(f"/admin/policies/{slug}?saved=true", status_code=303)


POLICY_ROUTES = [policies_page, policy_page, save_policy, rollback_policy]
