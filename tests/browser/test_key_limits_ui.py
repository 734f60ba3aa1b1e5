"""A key's own limits in the admin UI: set them on the tenant page (a bad value is refused, naming the
field), see them in the key list with the expiry and the last use, and rotate a key (the new key shown
once; the old one refused once its overlap, here none, has passed)."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, screenshot, sign_in
from tests.browser.test_admin_ui import create_key, create_tenant
from tests.conftest import Gateway


def chat(gateway: Gateway, key: str, model: str = "edge") -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "Name one colour."}], "max_tokens": 4}
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=120)


def test_set_a_keys_limits_see_them_listed_and_rotate_it(
    ui_gateway: Gateway, page: Page, console: Console
) -> None:
    sign_in(page, ui_gateway, path="/admin/tenants")
    create_tenant(page, ui_gateway, "key-limits")
    key_id, key = create_key(page, "search-team")
    console.expect(f"/admin/keys/{key_id}/limits", 400)  # the refused value below
    page.goto(f"{ui_gateway.url}/admin/tenants/key-limits")
    row = page.locator(f"tr[data-key='{key_id}']")
    expect(row.locator(f"[data-limits='{key_id}']")).to_contain_text("the tenant's")

    row.locator("summary").click()
    page.fill(f"#key-{key_id}-budget_day_usd", "-1")
    row.get_by_role("button", name="Save limits").click()
    expect(page.get_by_role("alert")).to_contain_text("budget_day_usd")  # refused, nothing changed

    row = page.locator(f"tr[data-key='{key_id}']")
    row.locator("summary").click()
    page.fill(f"#key-{key_id}-budget_day_usd", "")
    page.fill(f"#key-{key_id}-budget_month_usd", "50")
    page.fill(f"#key-{key_id}-tiers", "edge")
    page.fill(f"#key-{key_id}-models", "edge,tiergate-auto")
    page.fill(f"#key-{key_id}-expires_at", "2099-01-31T00:00:00Z")
    page.fill(f"#key-{key_id}-requests_per_min", "30")
    row.get_by_role("button", name="Save limits").click()
    expect(page).to_have_url(f"{ui_gateway.url}/admin/tenants/key-limits")
    limits = page.locator(f"[data-limits='{key_id}']")
    for shown in ("$50.00/month", "tiers: edge", "models: edge, tiergate-auto", "30 req/min"):
        expect(limits).to_contain_text(shown)
    expect(page.locator(f"tr[data-key='{key_id}']")).to_contain_text("2099-01-31 00:00")

    assert chat(ui_gateway, key).status_code == 200
    refused = chat(ui_gateway, key, model="some-model")
    assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"
    screenshot(page, "key-limits")

    row = page.locator(f"tr[data-key='{key_id}']")
    row.locator("summary").click()
    page.fill(f"#key-{key_id}-overlap", "0")
    row.get_by_role("button", name=f"Rotate key {key_id}").click()
    shown = page.locator("#new-key-value")
    expect(shown).to_be_visible()
    new = shown.input_value()
    assert new.startswith(f"tg_{key_id}_") and new != key
    assert chat(ui_gateway, key).status_code == 401
    assert chat(ui_gateway, new).status_code == 200
