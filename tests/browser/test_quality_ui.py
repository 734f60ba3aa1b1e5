"""The quality page: a tenant's labels per tier, hour by hour, and where they came from."""

from __future__ import annotations

import uuid

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in
from tests.conftest import Gateway


def test_the_quality_page_shows_a_tenants_labels(ui_gateway: Gateway, page: Page) -> None:
    gw = ui_gateway
    name = f"quality-{uuid.uuid4().hex[:6]}"
    httpx.post(f"{gw.url}/admin/api/tenants", json={"name": name}, headers=gw.admin).raise_for_status()
    key = httpx.post(f"{gw.url}/admin/api/tenants/{name}/keys", headers=gw.admin).json()["key"]
    auth = {"Authorization": f"Bearer {key}"}
    body = {"model": "edge", "messages": [{"role": "user", "content": "Name a planet."}], "max_tokens": 4}
    answer = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=auth, timeout=60).json()
    given = httpx.post(f"{gw.url}/v1/feedback", json={"id": answer["id"], "label": "bad"}, headers=auth)
    assert given.status_code == 200, given.text
    sign_in(page, gw)
    page.goto(f"{gw.url}/admin/quality?tenant={name}")
    row = page.locator(f"tr[data-quality='{name}/edge']")
    expect(row).to_contain_text("1")
    expect(row).to_contain_text("0 %")
    expect(page.get_by_role("table").nth(1)).to_contain_text("feedback")
    expect(page.get_by_role("link", name="Quality")).to_have_attribute("aria-current", "page")
