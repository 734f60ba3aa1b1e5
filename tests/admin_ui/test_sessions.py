"""Admin sessions: random tokens, stored hashed, ended by idle time, age, sign-out or key revocation."""

from __future__ import annotations

import pytest

from admin_ui._guard import safe_next
from admin_ui._sessions import SessionStore, same


def test_a_session_is_found_by_its_token_only() -> None:
    store = SessionStore(idle_s=60, max_s=3600)
    token, session = store.open("k1")
    assert store.get(token) is session
    assert store.get(token + "x") is None and store.get("") is None and store.get(None) is None
    assert token not in store._sessions  # only a hash of the token is kept
    other, _ = store.open("k1")
    assert other != token and store.get(other).csrf != session.csrf  # type: ignore[union-attr]


def test_sessions_end_when_idle_too_old_closed_or_their_key_revoked(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr("admin_ui._sessions.time.monotonic", lambda: clock[0])
    store = SessionStore(idle_s=10, max_s=25)
    idle, _ = store.open("k1")
    clock[0] += 11
    assert store.get(idle) is None

    busy, _ = store.open("k1")
    for _ in range(2):
        clock[0] += 9
        assert store.get(busy) is not None  # used within the idle time
    clock[0] += 9
    assert store.get(busy) is None  # past session_max_s however busy

    a, _ = store.open("k1")
    b, _ = store.open("k2")
    store.close_key("k1")
    assert store.get(a) is None and store.get(b) is not None
    store.close(b)
    assert store.get(b) is None and len(store) == 0


def test_csrf_tokens_compare_in_constant_time_and_empty_never_matches() -> None:
    assert same("abc", "abc") and not same("abc", "abd") and not same("", "")


@pytest.mark.parametrize(
    ("asked", "goes"),
    [
        ("/admin/costs?tenant=a", "/admin/costs?tenant=a"),
        ("https://evil.example/admin/", "/admin/live"),
        ("//evil.example/admin/", "/admin/live"),
        ("/admin/\\evil", "/admin/live"),
        ("/v1/models", "/admin/live"),
        (None, "/admin/live"),
    ],
)
def test_sign_in_only_returns_to_admin_pages(asked: str | None, goes: str) -> None:
    assert safe_next(asked) == goes
