"""Signed-in operators: server-side sessions behind an HttpOnly, SameSite=Strict cookie.

The cookie carries a random token; the store keeps only its SHA-256, with the admin key the
operator signed in with (so revoking that key ends the session), a CSRF token for the
session's forms, and when it was made and last used.  Sessions live in this process: a
restart signs everyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

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
    key_id: str  # the admin key used to sign in
    csrf: str
    created: float
    last_seen: float


class SessionStore:
    def __init__(self, idle_s: float, max_s: float) -> None:
        self._idle_s = idle_s
        self._max_s = max_s
        self._sessions: dict[str, Session] = {}

    def open(self, key_id: str) -> tuple[str, Session]:
        """A new session for ``key_id``: (the cookie's token, the session)."""
        now = time.monotonic()
        if len(self._sessions) >= _MAX_SESSIONS:
            self._expire(now)
            if len(self._sessions) >= _MAX_SESSIONS:  # still full: drop the least recently used
                oldest = min(self._sessions, key=lambda k: self._sessions[k].last_seen)
                del self._sessions[oldest]
        token = secrets.token_urlsafe(32)
        session = Session(key_id=key_id, csrf=secrets.token_urlsafe(32), created=now, last_seen=now)
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
        if now - session.last_seen > self._idle_s or now - session.created > self._max_s:
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
        for digest in [
            d
            for d, s in self._sessions.items()
            if now - s.last_seen > self._idle_s or now - s.created > self._max_s
        ]:
            del self._sessions[digest]

    def __len__(self) -> int:
        return len(self._sessions)
