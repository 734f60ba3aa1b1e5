"""Sign in with an admin key (the break-glass way in, unless ``admin_ui.key_sign_in = false``), sign out
(a person signed in through single sign-on is then sent to the provider's sign-out too, when it has one)."""

from __future__ import annotations

import secrets

from litestar import get, post
from litestar.di import NamedDependency
from litestar.params import FromQuery
from litestar.response import Redirect, Template

from admin_ui._context import UI, cookie, page, services
from admin_ui._guard import (
    AnyRequest,
    CsrfRefused,
    SignInRequired,
    check_origin,
    checked_form,
    landing,
    operator,
    safe_next,
)
from admin_ui._sessions import COOKIE, LOGIN_COOKIE, same
from admin_ui._sso import record_sign_out
from gateway.accounts.audit import Actor, Event
from gateway.accounts.tenants import key_id_of
from gateway.errors import AuthenticationFailed, RateLimited
from gateway.ops.clients import CLIENT_HOST


async def _record(request: AnyRequest, key_id: str | None, action: str, why: str = "") -> None:
    """A sign-in (or a refused one) in the audit trail: the key's id, never the key."""
    actor = Actor.of_key(key_id or "unknown", CLIENT_HOST.get())
    after = {"method": "key", "reason": why} if why else {"method": "key"}
    event = Event(actor=actor, action=action, object_type="session", object_id=actor.id, after=after)
    await services(request).audit.record_async(event)


def _form(request: AnyRequest, ui: UI, next_path: str, error: str = "", status: int = 200) -> Template:
    """The sign-in page: single sign-on's button and/or the key form, with a fresh CSRF token in a
    cookie and in the form (double submit)."""
    token = secrets.token_urlsafe(32)
    return page(
        None,
        "signin.html",
        title="Sign in",
        status=status,
        login_csrf=token,
        next_path=next_path,
        error=error,
        key_sign_in=ui.settings.key_sign_in,
        sso_name=ui.settings.oidc.display_name if ui.sso is not None else "",
        cookies=[cookie(request, LOGIN_COOKIE, token, 3600)] if ui.settings.key_sign_in else [],
    )


@get("/", name="admin_ui:home")
async def home(request: AnyRequest, ui: NamedDependency[UI]) -> Redirect:
    try:
        op = await operator(request, ui.sessions)
    except SignInRequired:
        return Redirect("/admin/login", status_code=303)
    return Redirect(landing(op.caller), status_code=303)


@get("/login", name="admin_ui:login")
async def sign_in_form(
    request: AnyRequest,
    ui: NamedDependency[UI],
    next: FromQuery[str | None] = None,
) -> Template | Redirect:
    session = ui.sessions.get(request.cookies.get(COOKIE))
    if session is not None:
        return Redirect(safe_next(next, landing(session.person) if session.person else None), status_code=303)
    return _form(request, ui, safe_next(next, ""))


@post("/login", name="admin_ui:sign_in")
async def sign_in(request: AnyRequest, ui: NamedDependency[UI]) -> Template | Redirect:
    if not ui.settings.key_sign_in:
        raise CsrfRefused(
            "signing in with a key is turned off on this gateway (admin_ui.key_sign_in = false)"
        )
    check_origin(request)
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not same(fields.get("csrf_token", ""), request.cookies.get(LOGIN_COOKIE, "")):
        raise CsrfRefused("the sign-in form has no valid CSRF token")
    next_path = safe_next(fields.get("next"), "")
    running = services(request)
    key = fields.get("key", "").strip()
    try:
        caller = await running.auth.caller({"authorization": f"Bearer {key}"})
    except AuthenticationFailed as exc:
        await _record(request, key_id_of(key), "sign_in.failed", exc.message)
        return _form(request, ui, next_path, "That is not a valid admin key.", status=401)
    except RateLimited as exc:  # too many failed sign-ins from this address
        await _record(request, key_id_of(key), "sign_in.failed", exc.message)
        refused = _form(request, ui, next_path, f"{exc.message}.", status=429)
        refused.headers.update(exc.headers())
        return refused
    if not caller.is_admin:
        await _record(request, caller.key_id, "sign_in.failed", "a tenant's key, not an admin key")
        return _form(request, ui, next_path, "That key belongs to a tenant; sign in with an admin key.", 403)
    await _record(request, caller.key_id, "sign_in.succeeded")
    token, _ = ui.sessions.open(caller.key_id)
    redirect = Redirect(next_path or landing(caller), status_code=303)
    redirect.cookies.append(cookie(request, COOKIE, token, int(ui.settings.session_max_s)))
    redirect.cookies.append(cookie(request, LOGIN_COOKIE, "", 0))
    return redirect


@post("/logout", name="admin_ui:sign_out")
async def sign_out(request: AnyRequest, ui: NamedDependency[UI]) -> Redirect | Template:
    op = await operator(request, ui.sessions)
    await checked_form(request, op.csrf)
    ui.sessions.close(op.token)
    if op.caller.person:
        await record_sign_out(request, op)
    else:
        await _record(request, op.caller.key_id, "sign_out")
    gone = cookie(request, COOKIE, "", 0)
    at_provider = None
    if op.session.person is not None and ui.sso is not None:
        back = f"{request.url.scheme}://{request.url.netloc}/admin/login"
        at_provider = await ui.sso.end_session_url(op.session.id_token, back)
    if at_provider is None:
        redirect = Redirect("/admin/login", status_code=303)
        redirect.cookies.append(gone)
        return redirect
    # A page that goes on to the provider, not a redirect: the sign-out form's answer may only
    # redirect within this site (the pages' CSP has form-action 'self').
    return page(None, "signed_out.html", title="Signed out", provider_url=at_provider, cookies=[gone])


SIGN_IN_ROUTES = [home, sign_in_form, sign_in, sign_out]
