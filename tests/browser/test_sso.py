"""Single sign-on to the admin UI against a real OpenID provider (panva's certified oidc-provider, run by
node on loopback), in a real Chromium: each role's sign-in and what it may see and change, sign-out
(here and at the provider), a session ending with its ID token, a tampered ID token, a token for another
audience, and the provider's keys rotated while the gateway runs.

One provider and one gateway for the module; the gateway has ``key_sign_in = false`` (SSO only).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import secrets
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from playwright.sync_api import BrowserContext, Page, expect

from gateway.accounts.people import OidcSettings, RelyingParty, SignInFailed
from tests.browser.conftest import Console, screenshot
from tests.browser.oidc import CLIENT_SECRET, OTHER_CLIENT, PASSWORD, OpenIDProvider, node_path
from tests.conftest import Gateway, free_port, start_gateway

ROLES = {"ops-admins": "admin", "auditors": "viewer", "team-blue-leads": "tenant-admin:blue"}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenIDProvider]:
    if node_path() is None:
        pytest.skip("node is not installed (the OpenID provider of these tests runs on it)")
    tmp = tmp_path_factory.mktemp("oidc")
    idp = OpenIDProvider(free_port(), free_port(), tmp / "provider.log")
    idp.start()
    yield idp
    idp.stop()


@pytest.fixture(scope="module")
def sso_gateway(provider: OpenIDProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    roles = "\n".join(f'"{group}" = "{role}"' for group, role in ROLES.items())
    config = f"""
[cloud]
enabled = false
[admin_ui]
key_sign_in = false
[admin_ui.oidc]
issuer = "{provider.issuer}"
client_id = "tiergate"
client_secret_env = "SSO_TEST_CLIENT_SECRET"
scopes = ["openid", "email", "profile", "groups"]
display_name = "the test provider"
[admin_ui.oidc.roles]
{roles}
"""
    gw = start_gateway(
        tmp_path_factory.mktemp("sso-gateway"),
        config,
        env={"SSO_TEST_CLIENT_SECRET": CLIENT_SECRET},
        edge=False,
        port=provider.gateway_port,
    )
    for tenant in ("blue", "green"):
        made = httpx.post(f"{gw.url}/admin/api/tenants", headers=gw.admin, json={"name": tenant})
        assert made.status_code == 201, made.text
        key = httpx.post(f"{gw.url}/admin/api/tenants/{tenant}/keys", headers=gw.admin, json={"name": "svc"})
        assert key.status_code == 201, key.text
    yield gw
    gw.stop()


def sso_sign_in(page: Page, gw: Gateway, login: str, path: str = "/admin/login") -> None:
    """Through the gateway's sign-in page to the provider's, and back."""
    page.goto(f"{gw.url}{path}")
    page.click("#sso")
    page.fill("#login", login)
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")


def audit_rows(gw: Gateway, action_prefix: str) -> list[dict[str, Any]]:
    with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
        db.row_factory = sqlite3.Row
        rows = db.execute(
            "SELECT * FROM audit_log WHERE action LIKE ? ORDER BY seq", (f"{action_prefix}%",)
        ).fetchall()
    return [dict(r) for r in rows]


def no_secret_in(rows: list[dict[str, Any]]) -> None:
    text = json.dumps(rows)
    assert CLIENT_SECRET not in text and "eyJ" not in text  # no secret, no JWT (they start with eyJ)


def test_the_sign_in_page_offers_single_sign_on_and_no_key_form(
    sso_gateway: Gateway, page: Page, console: Console
) -> None:
    page.goto(f"{sso_gateway.url}/admin/login")
    expect(page.locator("#sso")).to_have_text("Sign in with the test provider")
    expect(page.locator("#key")).to_have_count(0)  # key_sign_in = false: no key form
    screenshot(page, "sso-sign-in")
    # Posting the key form anyway is refused, with a valid admin key and all.
    console.expect("/admin/login", 403)
    refused = page.request.post(f"{sso_gateway.url}/admin/login", form={"key": sso_gateway.admin_key})
    assert refused.status == 403 and "key_sign_in = false" in refused.text()


def test_an_admin_signs_in_sees_everything_and_changes_it(
    sso_gateway: Gateway, page: Page, context: BrowserContext
) -> None:
    sso_sign_in(page, sso_gateway, "alice")
    expect(page).to_have_url(f"{sso_gateway.url}/admin/live")  # not bounced back to the sign-in page
    expect(page.locator("#who")).to_contain_text("alice@example.com")
    expect(page.locator("#who .pill")).to_have_text("admin")
    session = next(c for c in context.cookies() if c["name"] == "tiergate_admin")
    assert session["httpOnly"] and session["sameSite"] == "Lax" and session["path"] == "/admin"
    page.goto(f"{sso_gateway.url}/admin/tenants/green")
    page.fill("#label", "made-by-alice")
    page.click("text=Create key")
    expect(page.locator("#new-key-value")).to_be_visible()
    screenshot(page, "sso-admin")
    signed_in = audit_rows(sso_gateway, "sign_in.succeeded")
    assert any(r["actor"] == "alice@example.com" and r["actor_kind"] == "person" for r in signed_in)
    made = [r for r in audit_rows(sso_gateway, "key.created") if "made-by-alice" in (r["after"] or "")]
    assert len(made) == 1 and made[0]["actor"] == "alice@example.com" and made[0]["actor_kind"] == "person"
    no_secret_in(signed_in + made)


def test_a_viewer_sees_everything_and_changes_nothing(
    sso_gateway: Gateway, page: Page, console: Console
) -> None:
    sso_sign_in(page, sso_gateway, "victor")
    expect(page).to_have_url(f"{sso_gateway.url}/admin/live")
    expect(page.locator("#who .pill")).to_have_text("viewer")
    page.goto(f"{sso_gateway.url}/admin/tenants")
    expect(page.locator("a[href='/admin/tenants/blue']")).to_be_visible()
    expect(page.locator("a[href='/admin/tenants/green']")).to_be_visible()
    expect(page.locator("text=Create tenant")).to_have_count(0)
    page.goto(f"{sso_gateway.url}/admin/tenants/blue")
    expect(page.locator("tr[data-key]")).to_have_count(1)  # the keys are listed...
    expect(page.locator("button:has-text('Revoke')")).to_have_count(0)  # ...with nothing to change them
    expect(page.locator("text=Create key")).to_have_count(0)
    screenshot(page, "sso-viewer")
    page.goto(f"{sso_gateway.url}/admin/policies/blue")
    expect(page.locator("#read-only")).to_contain_text("a viewer changes nothing")
    fields = page.locator("form.policy :is(input, select):not([type=hidden])")
    assert fields.count() > 5
    for i in range(fields.count()):
        expect(fields.nth(i)).to_be_disabled()  # in a disabled fieldset
    expect(page.locator("text=Save policy")).to_have_count(0)
    # The controls are not only hidden: every change is refused where the admin API authorizes.
    csrf = page.locator("form.signout input[name=csrf_token]").get_attribute("value") or ""
    key_id = httpx.get(f"{sso_gateway.url}/admin/api/tenants/blue/keys", headers=sso_gateway.admin).json()[
        "data"
    ][0]["id"]
    posts = {
        "/admin/tenants": {"name": "viewer-made"},
        "/admin/tenants/blue/keys": {"label": "viewer-key"},
        f"/admin/keys/{key_id}/revoke": {},
        f"/admin/keys/{key_id}/rotate": {"overlap_hours": "1"},
        f"/admin/keys/{key_id}/limits": {"requests_per_min": "5"},
        "/admin/policies/blue/rollback": {"version": "1"},
        "/admin/policies/_default": {"strategy": "always-edge"},
    }
    for path, form in posts.items():
        console.expect(path, 403)
        answer = page.request.post(f"{sso_gateway.url}{path}", form={"csrf_token": csrf, **form})
        assert answer.status == 403, (path, answer.status)
        assert "changes nothing" in answer.text(), path
    keys = httpx.get(f"{sso_gateway.url}/admin/api/tenants/blue/keys", headers=sso_gateway.admin).json()[
        "data"
    ]
    assert [k["id"] for k in keys] == [key_id] and keys[0]["revoked_at"] is None
    page.goto(f"{sso_gateway.url}/admin/audit")  # a viewer reads the whole trail
    expect(page.locator("table")).to_contain_text("green")


def test_a_tenant_admin_sees_and_changes_only_their_tenant(
    sso_gateway: Gateway, page: Page, console: Console
) -> None:
    sso_sign_in(page, sso_gateway, "tara")
    expect(page).to_have_url(f"{sso_gateway.url}/admin/tenants")
    expect(page.locator("#who .pill")).to_have_text("tenant-admin")
    expect(page.locator("a[href='/admin/tenants/blue']")).to_be_visible()
    expect(page.locator("a[href='/admin/tenants/green']")).to_have_count(0)  # the other tenant: invisible
    expect(page.locator("nav a[href='/admin/live']")).to_have_count(0)
    expect(page.locator("text=Create tenant")).to_have_count(0)
    page.goto(f"{sso_gateway.url}/admin/tenants/blue")
    page.fill("#label", "made-by-tara")
    page.click("text=Create key")
    expect(page.locator("#new-key-value")).to_be_visible()
    screenshot(page, "sso-tenant-admin")
    page.goto(f"{sso_gateway.url}/admin/policies")
    expect(page.locator("a[href='/admin/policies/blue']")).to_be_visible()
    expect(page.locator("a[href='/admin/policies/green']")).to_have_count(0)
    for path in ("/admin/tenants/green", "/admin/policies/green"):
        console.expect(path, 404)
        assert page.goto(f"{sso_gateway.url}{path}").status == 404, path  # type: ignore[union-attr]
    console.expect("/admin/live", 403)
    assert page.goto(f"{sso_gateway.url}/admin/live").status == 403  # type: ignore[union-attr]
    page.goto(f"{sso_gateway.url}/admin/costs")
    expect(page.locator("#tenant")).to_have_value("blue")
    green_key = httpx.get(
        f"{sso_gateway.url}/admin/api/tenants/green/keys", headers=sso_gateway.admin
    ).json()["data"][0]
    page.goto(f"{sso_gateway.url}/admin/tenants/blue")
    csrf = page.locator("form.signout input[name=csrf_token]").get_attribute("value") or ""
    console.expect(f"/admin/keys/{green_key['id']}/revoke", 404)
    other = page.request.post(
        f"{sso_gateway.url}/admin/keys/{green_key['id']}/revoke", form={"csrf_token": csrf}
    )
    assert other.status == 404  # another tenant's key does not exist for them
    made = [r for r in audit_rows(sso_gateway, "key.created") if "made-by-tara" in (r["after"] or "")]
    assert len(made) == 1 and made[0]["actor"] == "tara@example.com" and made[0]["tenant"] == "blue"
    page.goto(f"{sso_gateway.url}/admin/audit")  # the trail: their tenant's rows only
    expect(page.locator("tr[data-seq]").first).to_be_visible()
    assert "green" not in page.locator("table").inner_text()


def test_a_person_in_no_mapped_group_is_refused(sso_gateway: Gateway, page: Page, console: Console) -> None:
    console.expect("/admin/oidc/callback", 403)
    sso_sign_in(page, sso_gateway, "nobody")
    expect(page.locator("#sso-refused h1")).to_have_text("Sign-in refused")
    expect(page.locator("#sso-who")).to_have_text("nobody@example.com")
    screenshot(page, "sso-no-role")
    assert page.context.cookies() and not [c for c in page.context.cookies() if c["name"] == "tiergate_admin"]
    failed = [r for r in audit_rows(sso_gateway, "sign_in.failed") if r["actor"] == "nobody@example.com"]
    assert len(failed) == 1 and "no group mapped" in failed[0]["after"]


def test_sign_out_ends_the_session_here_and_at_the_provider(sso_gateway: Gateway, page: Page) -> None:
    sso_sign_in(page, sso_gateway, "alice")
    expect(page).to_have_url(f"{sso_gateway.url}/admin/live")
    page.click("form.signout button")
    page.click("text=Yes, sign me out")  # the provider's own RP-initiated logout page
    expect(page).to_have_url(f"{sso_gateway.url}/admin/login")
    page.goto(f"{sso_gateway.url}/admin/live")
    expect(page).to_have_url(f"{sso_gateway.url}/admin/login?next=/admin/live")
    page.click("#sso")
    expect(page.locator("#login")).to_be_visible()  # signed out at the provider too: asked to sign in again
    outs = [r for r in audit_rows(sso_gateway, "sign_out") if r["actor"] == "alice@example.com"]
    assert len(outs) >= 1


def test_the_session_ends_when_the_id_token_expires(
    sso_gateway: Gateway, provider: OpenIDProvider, page: Page, console: Console
) -> None:
    console.expect("/admin/live/panel", 401)  # the live view's refresh, once the session is over
    provider.set_id_token_ttl(4)
    try:
        sso_sign_in(page, sso_gateway, "victor")
        expect(page).to_have_url(f"{sso_gateway.url}/admin/live")
    finally:
        provider.set_id_token_ttl(3600)
    time.sleep(4.5)
    page.goto(f"{sso_gateway.url}/admin/tenants")
    expect(page).to_have_url(f"{sso_gateway.url}/admin/login?next=/admin/tenants")


def test_a_tampered_id_token_is_refused(
    sso_gateway: Gateway, provider: OpenIDProvider, page: Page, console: Console
) -> None:
    provider.tamper_next_id_token()  # victor's token, made to say he is in ops-admins
    console.expect("/admin/oidc/callback", 401)
    sso_sign_in(page, sso_gateway, "victor")
    expect(page.locator("#sso-refused .error")).to_contain_text("signature")
    assert not [c for c in page.context.cookies() if c["name"] == "tiergate_admin"]
    failed = audit_rows(sso_gateway, "sign_in.failed")
    assert any("signature" in (r["after"] or "") for r in failed)
    no_secret_in(failed)


def test_a_sign_in_is_bound_to_the_browser_that_started_it(
    sso_gateway: Gateway, page: Page, console: Console
) -> None:
    """A sign-in started elsewhere (an attacker's) and finished in this browser signs nobody in; nor does a
    state the gateway never issued. The request to the provider carries PKCE (S256), a nonce and a state."""
    started = httpx.get(f"{sso_gateway.url}/admin/oidc/start", follow_redirects=False)
    assert started.status_code == 303 and "tiergate_oidc=" in started.headers["set-cookie"]
    sent = parse_qs(urlsplit(started.headers["location"]).query)
    assert sent["code_challenge_method"] == ["S256"] and sent["response_type"] == ["code"]
    assert all(len(sent[name][0]) >= 32 for name in ("state", "nonce", "code_challenge"))
    console.expect("/admin/oidc/callback", 401)
    page.goto(started.headers["location"])
    page.fill("#login", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.locator("#sso-refused .error")).to_contain_text("started in another browser")
    assert not [c for c in page.context.cookies() if c["name"] == "tiergate_admin"]
    never = httpx.get(f"{sso_gateway.url}/admin/oidc/callback", params={"code": "x", "state": "never-issued"})
    assert never.status_code == 401 and "not started here" in never.text


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def test_an_id_token_for_another_audience_is_refused(provider: OpenIDProvider, page: Page) -> None:
    """A real ID token the provider issued to another client (``other-app``), given to the gateway's
    token check: refused for its audience, while a relying party that is ``other-app`` accepts it."""
    client_id, secret = OTHER_CLIENT
    verifier, challenge = _pkce()
    nonce, redirect = secrets.token_urlsafe(16), f"{provider.issuer}/test/echo"
    query = urlencode(
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": redirect,
            "scope": "openid groups",
            "nonce": nonce,
            "state": "s",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )
    page.goto(f"{provider.issuer}/auth?{query}")
    page.fill("#login", "alice")
    page.fill("#password", PASSWORD)
    page.click("button[type=submit]")
    expect(page).to_have_url(re.compile(re.escape(redirect) + r"\?"))
    code = json.loads(page.locator("body").inner_text())["code"]
    tokens = httpx.post(
        f"{provider.direct}/token",
        auth=(client_id, secret),
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect,
            "code_verifier": verifier,
        },
    ).json()
    id_token = tokens["id_token"]

    def verify(as_client: str) -> dict[str, Any]:
        settings = OidcSettings(issuer=provider.issuer, client_id=as_client, roles={"ops-admins": "admin"})
        # In a thread of its own: Playwright's sync API holds this thread's event loop.
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, RelyingParty(settings).verify(id_token, nonce)).result()

    assert verify(client_id)["aud"] == client_id  # a genuine token of the provider's...
    with pytest.raises(SignInFailed, match="aud"):
        verify("tiergate")  # ...not for this gateway


def test_a_key_rotated_at_the_provider_is_picked_up_while_the_gateway_runs(
    sso_gateway: Gateway, provider: OpenIDProvider, page: Page, context: BrowserContext
) -> None:
    sso_sign_in(page, sso_gateway, "alice")  # the gateway holds the provider's current keys
    expect(page).to_have_url(f"{sso_gateway.url}/admin/live")
    before = provider.kids()
    provider.rotate_keys()
    assert provider.kids() != before and not set(provider.kids()) & set(before)
    context.clear_cookies()
    sso_sign_in(page, sso_gateway, "alice")  # signed with a key the gateway has not seen yet
    expect(page).to_have_url(f"{sso_gateway.url}/admin/live")
    expect(page.locator("#who .pill")).to_have_text("admin")


def test_the_client_secret_is_in_no_log_and_not_in_the_settings_file(sso_gateway: Gateway) -> None:
    assert CLIENT_SECRET not in sso_gateway.log_path.read_text()
    assert CLIENT_SECRET not in Path(sso_gateway.data_dir.parent / "tiergate.toml").read_text()
