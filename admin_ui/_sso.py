"""Single sign-on through the organisation's identity provider (OpenID Connect, ``[admin_ui.oidc]``).

    GET /admin/oidc/start?next=...   the browser goes to the provider (state, nonce, PKCE made here)
    GET /admin/oidc/callback         the provider sends it back with a code: the code is exchanged, the
                                     ID token checked (gateway.accounts.people), the person's groups
                                     mapped to a role, and a session opened until the token expires

Every sign-in, refused sign-in and sign-out of a person is recorded in the audit trail, naming the
person (email, else subject) and never a token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Annotated

from litestar import get
from litestar.di import NamedDependency
from litestar.params import FromQuery, Parameter
from litestar.response import Redirect, Template

from admin_ui._context import UI, cookie, page, services
from admin_ui._guard import AnyRequest, Operator, landing, safe_next
from admin_ui._sessions import COOKIE
from gateway.accounts.audit import Actor, Event
from gateway.accounts.people import RelyingParty, SignInFailed, groups_of, person_caller
from gateway.errors import NotFound
from gateway.ops.clients import CLIENT_HOST

log = logging.getLogger("tiergate.admin_ui.sso")

CALLBACK = "/admin/oidc/callback"
BIND_COOKIE = "tiergate_oidc"  # ties a sign-in's state to the browser that started it
BIND_PATH = "/admin/oidc"


def _sso(ui: UI) -> RelyingParty:
    if ui.sso is None:
        raise NotFound("single sign-on is not set up on this gateway ([admin_ui.oidc] issuer)")
    return ui.sso


def redirect_uri(request: AnyRequest) -> str:
    """``<gateway>/admin/oidc/callback`` as this request reached the gateway (its scheme as a trusted
    proxy reports it); the provider accepts only the URI registered there."""
    return f"{request.url.scheme}://{request.url.netloc}{CALLBACK}"


async def _record(request: AnyRequest, who: str, action: str, after: Mapping[str, object]) -> None:
    event = Event(
        actor=Actor.of_person(who or "unknown", CLIENT_HOST.get()),
        action=action,
        object_type="session",
        object_id=who or "unknown",
        after=after,
    )
    await services(request).audit.record_async(event)


async def record_sign_out(request: AnyRequest, op: Operator) -> None:
    """A person's sign-out, in the audit trail (a key's session is not a person's)."""
    if op.caller.person:
        await _record(request, op.caller.person, "sign_out", {"role": op.caller.role})


def _refused(request: AnyRequest, reason: str, status: int, who: str = "") -> Template:
    gone = cookie(request, BIND_COOKIE, "", 0, path=BIND_PATH)
    return page(
        None,
        "sso_refused.html",
        title="Sign-in refused",
        status=status,
        reason=reason,
        who=who,
        cookies=[gone],
    )


@get("/oidc/start", name="admin_ui:sso_start")
async def sso_start(
    request: AnyRequest, ui: NamedDependency[UI], next: FromQuery[str | None] = None
) -> Redirect | Template:
    sso = _sso(ui)
    try:
        url, browser = await sso.start(redirect_uri(request), safe_next(next, ""))
    except SignInFailed as exc:
        log.warning("single sign-on could not start: %s", exc.reason)
        return _refused(request, f"The identity provider could not be reached: {exc.reason}.", 502)
    redirect = Redirect(url, status_code=303)
    redirect.cookies.append(cookie(request, BIND_COOKIE, browser, 600, path=BIND_PATH))
    return redirect


@get("/oidc/callback", name="admin_ui:sso_callback")
async def sso_callback(
    request: AnyRequest,
    ui: NamedDependency[UI],
    code: FromQuery[str | None] = None,
    # "state" is a reserved handler argument in Litestar (the app state): read under another name.
    oidc_state: Annotated[str | None, Parameter(query="state")] = None,
    iss: FromQuery[str | None] = None,
    error: FromQuery[str | None] = None,
    error_description: FromQuery[str | None] = None,
) -> Redirect | Template:
    sso = _sso(ui)
    if error is not None:  # the provider refused (the person cancelled, or was not let in)
        reason = f"the identity provider answered {error}" + (
            f": {error_description}" if error_description else ""
        )
        await _record(request, "", "sign_in.failed", {"reason": reason[:300]})
        return _refused(request, reason[:300].capitalize() + ".", 401)
    if iss is not None and iss != sso.settings.issuer:  # RFC 9207: an answer from another provider
        await _record(request, "", "sign_in.failed", {"reason": "the answer names another issuer"})
        return _refused(request, "Sign-in refused: the answer came from another identity provider.", 401)
    try:
        verified = await sso.finish(
            redirect_uri(request), oidc_state or "", code or "", request.cookies.get(BIND_COOKIE)
        )
    except SignInFailed as exc:
        log.warning("single sign-on refused: %s", exc.reason)
        await _record(request, "", "sign_in.failed", {"reason": exc.reason})
        return _refused(request, f"Sign-in refused: {exc.reason}.", 401)
    groups = groups_of(verified.claims, sso.settings.roles_claim)
    caller = person_caller(verified.person, groups, sso.settings.roles)
    if caller is None:
        await _record(
            request,
            verified.person,
            "sign_in.failed",
            {"reason": "no group mapped to a role", "groups": groups},
        )
        return _refused(request, "None of your groups is given a role on this gateway.", 403, verified.person)
    token, _ = ui.sessions.open(
        caller.key_id, person=caller, expires_at=verified.expires_at, id_token=verified.id_token
    )
    role = {"role": caller.role, "tenants": list(caller.tenants), "groups": groups}
    await _record(request, caller.person, "sign_in.succeeded", role)
    redirect = Redirect(verified.next_path or landing(caller), status_code=303)
    lifetime = int(min(ui.settings.session_max_s, max(verified.expires_at - time.time(), 1)))
    redirect.cookies.append(cookie(request, COOKIE, token, lifetime))
    redirect.cookies.append(cookie(request, BIND_COOKIE, "", 0, path=BIND_PATH))
    return redirect


SSO_ROUTES = [sso_start, sso_callback]
