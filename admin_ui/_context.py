"""What every admin page shares: the settings, the session store, and how a page is rendered."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from litestar import Response
from litestar.datastructures import Cookie
from litestar.response import Template

from admin_ui._guard import AnyRequest, Operator
from admin_ui._sessions import PATH, SessionStore
from gateway.accounts.people import RelyingParty
from gateway.errors import GatewayError, error_response
from gateway.services import Services, services_of
from gateway.settings import AdminUISettings

# Sent with every admin page and data answer: nothing cached, nothing framed, scripts and
# styles from this site only (no inline script or style anywhere in the pages).
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


@dataclass(slots=True)
class UI:
    settings: AdminUISettings
    sessions: SessionStore = field(init=False)
    sso: RelyingParty | None = field(init=False)  # None: no [admin_ui.oidc] issuer

    def __post_init__(self) -> None:
        self.sessions = SessionStore(self.settings.session_idle_s, self.settings.session_max_s)
        self.sso = RelyingParty(self.settings.oidc) if self.settings.oidc.enabled else None


def services(request: AnyRequest) -> Services:
    """The gateway's running services (the admin UI sees tiers and accounts only through them)."""
    return services_of(request.app.state)


def cookie(request: AnyRequest, key: str, value: str, max_age: int | None, path: str = PATH) -> Cookie:
    """An admin cookie: HttpOnly, SameSite=Lax (see admin_ui._sessions for why not Strict)."""
    return Cookie(
        key=key,
        value=value,
        path=path,
        max_age=max_age,
        httponly=True,
        samesite="lax",
        # Secure over HTTPS (as a trusted proxy reports it, too), and whenever the gateway listens
        # beyond loopback: a session cookie must not travel over a network in the clear.
        secure=request.url.scheme == "https" or not services(request).settings.server.on_loopback,
    )


def page(
    op: Operator | None,
    name: str,
    *,
    title: str,
    nav: str = "",
    status: int = 200,
    cookies: list[Cookie] | None = None,
    **context: Any,
) -> Template:
    """Render ``templates/<name>`` inside the layout, with the session's CSRF token at hand."""
    # What the templates show: a viewer's pages have no controls, a tenant admin's no gateway-wide pages.
    who = {
        "signed_in": op is not None,
        "can_change": op is not None and not op.caller.read_only,
        "sees_all": op is not None and op.caller.sees_all,
        "is_admin": op is not None and op.caller.is_admin,
        "person": op.caller.person if op else "",
        "role": op.caller.role if op else "",
    }
    return Template(
        template_name=name,
        context={"title": title, "nav": nav, "csrf": op.csrf if op else ""} | who | context,
        status_code=status,
        headers=SECURITY_HEADERS,
        cookies=cookies or [],
    )


DATA_PATHS = ("/admin/data/", "/admin/live/panel", "/admin/costs.csv")


def problem(request: AnyRequest, exc: GatewayError) -> Response[Any]:
    """A page's error (an unknown tenant, a bad parameter) as a page; data endpoints keep
    OpenAI's JSON error shape."""
    if request.url.path.startswith(DATA_PATHS):
        return error_response(request, exc)
    return page(None, "problem.html", title="Not possible", status=exc.status, message=exc.message)


def refused(request: AnyRequest, exc: Exception) -> Template:
    """A form post without this session's CSRF token, or from another site: 403."""
    return page(None, "refused.html", title="Refused", status=403, reason=str(exc))
