"""Who may see the admin pages, and which form posts are accepted.

A page without a valid session redirects to the sign-in page (303); a data endpoint answers
401 in OpenAI's error shape.  A key's session is valid while the admin key it was opened with still
exists, is an admin key and is not revoked; a person's (single sign-on) until the ID token expires.
What the operator may then see and change is decided by :mod:`gateway.accounts.tenants`' one rule
(``check_read``/``check_change``, also through ``AdminService``), as for the admin API.

Every form post must carry the session's CSRF token (``csrf_token``) and, when the browser sends
``Origin``, come from this origin; anything else is refused with 403.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from litestar import Request, Response
from litestar.datastructures import State
from litestar.response import Redirect

from admin_ui._sessions import COOKIE, Session, SessionStore, same
from gateway.accounts.tenants import ADMIN, Caller
from gateway.errors import AuthenticationFailed
from gateway.services import services_of

AnyRequest = Request[object, object, State]


class SignInRequired(Exception):
    """A page was asked for without a valid session."""

    def __init__(self, next_path: str) -> None:
        super().__init__("sign in first")
        self.next_path = next_path


class CsrfRefused(Exception):
    """A form post without this session's CSRF token, or from another origin."""


@dataclass(frozen=True, slots=True)
class Operator:
    """A signed-in operator: the session and the admin caller it acts as."""

    token: str
    session: Session
    caller: Caller

    @property
    def csrf(self) -> str:
        return self.session.csrf


def safe_next(path: str | None, default: str | None = "/admin/live") -> str:
    """Where to go after signing in: a path of this admin UI only (never another site), else
    ``default`` (``""``: the caller's :func:`landing`)."""
    if path and path.startswith("/admin/") and not path.startswith("//") and "\\" not in path:
        return path
    return "/admin/live" if default is None else default


async def operator(request: AnyRequest, sessions: SessionStore, *, page: bool = True) -> Operator:
    """The signed-in operator, else :class:`SignInRequired` (pages) or 401 (data)."""
    token = request.cookies.get(COOKIE)
    session = sessions.get(token)
    if session is not None and token is not None and session.person is not None:
        return Operator(token, session, session.person)
    if session is not None and token is not None:
        found = await asyncio.to_thread(services_of(request.app.state).tenants.lookup, session.key_id)
        if found is not None and found.role == ADMIN and not found.revoked:
            return Operator(token, session, Caller(key_id=session.key_id, role=ADMIN, tenant=None))
        sessions.close_key(session.key_id)
    if page:
        query = request.url.query
        raise SignInRequired(request.url.path + (f"?{query}" if query else ""))
    raise AuthenticationFailed("sign in to the admin UI first (or use the admin API with an admin key)")


def landing(caller: Caller) -> str:
    """Where a sign-in lands without a ``next``: the live view, or a tenant admin's tenants."""
    return "/admin/live" if caller.sees_all else "/admin/tenants"


def check_origin(request: AnyRequest) -> None:
    """A browser names the page a post comes from in ``Origin``; it must be this site."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    host = request.headers.get("host", "")
    if origin == "null" or urlsplit(origin).netloc != host:
        raise CsrfRefused("this form was posted from another site")


async def checked_form(request: AnyRequest, expected: str) -> dict[str, str]:
    """The posted form, once its CSRF token equals ``expected`` and its origin is this site."""
    check_origin(request)
    form = await request.form()
    fields = {k: v for k, v in form.items() if isinstance(v, str)}
    if not same(fields.pop("csrf_token", ""), expected):
        raise CsrfRefused("this form has no valid CSRF token")
    return fields


def to_sign_in(request: AnyRequest, exc: SignInRequired) -> Response[object]:
    return Redirect(f"/admin/login?next={quote(exc.next_path, safe='/')}", status_code=303)
