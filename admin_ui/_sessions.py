"""Signed-in operators: server-side sessions behind an HttpOnly, SameSite=Lax cookie.

The cookie carries a random token; the store keeps only its SHA-256, with the admin key the
operator signed in with (so revoking that key ends the session) or the person signed in through
single sign-on (their role, and the ID token's expiry, which ends the session), a CSRF token for
the session's forms, and when it was made and last used.  Sessions live in this process: a
restart signs everyone out.

Lax, not Strict: a sign-in through the identity provider ends with a navigation from the
provider's site to the callback, and the redirect that follows is still part of that cross-site
navigation, so a Strict cookie set at the callback is not sent with it (the browser lands on the
sign-in page again).  Lax cookies are sent on such top-level GET navigations and never on a
cross-site POST; every state-changing request is a POST that must also carry the session's CSRF
token and, when the browser names it, this site's Origin (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

from gateway.accounts.tenants import Caller

COOKIE = "tiergate_admin"
LOGIN_COOKIE = "tiergate_signin"  # the sign-in form's CSRF token (double submit), before a session
PATH = "/admin"
_MAX_SESSIONS = 10_000


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def same(a: str, b: str) -> bool:
    """Constant-time string equality (empty never matches)."""
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())


@dataclass(slots=True)
class Session:
    key_id: str  # the admin key used to sign in ("person:<who>" for single sign-on)
    csrf: str
    created: float
    last_seen: float
    person: Caller | None = None  # a person signed in through single sign-on, with their role
    expires_at: float | None = None  # wall-clock end: the ID token's expiry
    id_token: str = ""  # the provider's sign-out hint; never logged, shown or recorded

    def over(self, mono: float, wall: float, idle_s: float, max_s: float) -> bool:
        return (
            mono - self.last_seen > idle_s
            or mono - self.created > max_s
            or (self.expires_at is not None and wall >= self.expires_at)
        )


class SessionStore:
    def __init__(self, idle_s: float, max_s: float) -> None:
        self._idle_s = idle_s
        self._max_s = max_s
        self._sessions: dict[str, Session] = {}

    def open(
        self, key_id: str, person: Caller | None = None, expires_at: float | None = None, id_token: str = ""
    ) -> tuple[str, Session]:
        """A new session for ``key_id`` (or a person): (the cookie's token, the session)."""
        now = time.monotonic()
        if len(self._sessions) >= _MAX_SESSIONS:
            self._expire(now)
            if len(self._sessions) >= _MAX_SESSIONS:  # still full: drop the least recently used
                oldest = min(self._sessions, key=lambda k: self._sessions[k].last_seen)
                del self._sessions[oldest]
        token = secrets.token_urlsafe(32)
        session = Session(
            key_id=key_id,
            csrf=secrets.token_urlsafe(32),
            created=now,
            last_seen=now,
            person=person,
            expires_at=expires_at,
            id_token=id_token,
        )
        self._sessions[_digest(token)] = session
        return token, session

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        digest = _digest(token)
        session = self._sessions.get(digest)
        if session is None:
            return None
        now = time.monotonic()
        if session.over(now, time.time(), self._idle_s, self._max_s):
            del self._sessions[digest]
            return None
        session.last_seen = now
        return session

    def close(self, token: str | None) -> None:
        if token:
            self._sessions.pop(_digest(token), None)

    def close_key(self, key_id: str) -> None:
        """End every session signed in with ``key_id`` (the key was revoked)."""
        for digest in [d for d, s in self._sessions.items() if s.key_id == key_id]:
            del self._sessions[digest]

    def _expire(self, now: float) -> None:
        wall = time.time()
        for digest in [d for d, s in self._sessions.items() if s.over(now, wall, self._idle_s, self._max_s)]:
            del self._sessions[digest]

    def __len__(self) -> int:
        return len(self._sessions)
