"""The audit trail in the admin UI: changes made on the other pages and sign-ins (a refused one too)
listed newest first with who, from where and the value before and after; filters by person, object
and time; never a key. Its screenshot is docs/screenshots/audit-trail.png."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import LAPTOP, Console, screenshot, sign_in
from tests.browser.test_admin_ui import create_key, create_tenant
from tests.conftest import Gateway


def test_changes_and_sign_ins_listed_and_filtered_by_person_object_and_time(
    ui_gateway: Gateway, page: Page, console: Console, browser: Browser
) -> None:
    stranger = browser.new_context(viewport=LAPTOP)  # a refused sign-in, from another browser
    refused = stranger.new_page()
    refused.goto(f"{ui_gateway.url}/admin/login")
    refused.fill("#key", "tg_0123456789ab_not-the-secret")
    refused.click("form[action='/admin/login'] button[type=submit]")
    expect(refused.get_by_text("That is not a valid admin key.")).to_be_visible()
    stranger.close()

    admin_id = ui_gateway.admin_key.split("_")[1]
    sign_in(page, ui_gateway, path="/admin/tenants")
    create_tenant(page, ui_gateway, "audited")
    key_id, key = create_key(page, "reporting")

    page.goto(f"{ui_gateway.url}/admin/audit")
    expect(page.get_by_role("link", name="Audit")).to_have_attribute("aria-current", "page")
    rows = page.locator("table.audit tbody tr")
    newest = rows.first
    expect(newest).to_contain_text("key.created")
    expect(newest).to_contain_text(key_id)
    expect(newest).to_contain_text(admin_id)
    expect(newest).to_contain_text("127.0.0.1")
    newest.locator("summary").click()
    expect(newest.locator("pre").nth(1)).to_contain_text('"name": "reporting"')
    expect(page.locator("table.audit")).not_to_contain_text(key.split("_")[2])  # never the key
    failed = page.locator("tr", has=page.locator("code.action", has_text="sign_in.failed"))
    expect(failed.first).to_contain_text("0123456789ab")
    screenshot(page, "audit-trail")

    page.select_option("#object_type", "tenant")
    page.fill("#object_id", "audited")
    page.click("text=Show")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("tenant.created")
    expect(page.locator("#object_type")).to_have_value("tenant")  # the filter stays shown

    page.goto(f"{ui_gateway.url}/admin/audit")
    page.fill("#actor", admin_id)
    page.click("text=Show")
    actions = rows.locator("code.action").all_inner_texts()
    assert {"sign_in.succeeded", "tenant.created", "key.created"} <= set(actions)
    assert "sign_in.failed" not in actions

    page.fill("#since", "2099-01-01T00:00:00")
    page.click("text=Show")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("No changes match.")

    console.expect("/admin/audit", 400)
    page.goto(f"{ui_gateway.url}/admin/audit?since=yesterday")
    expect(page.locator("#since-error")).to_contain_text("ISO-8601")
