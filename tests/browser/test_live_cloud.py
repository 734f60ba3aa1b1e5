"""With the cloud pool (the real local vLLM replica): the live view shows it, and a policy edited in
the browser moves the next request between the tiers."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import screenshot, sign_in
from tests.browser.test_admin_ui import create_key, create_tenant
from tests.conftest import Gateway

pytestmark = pytest.mark.cloud


def test_the_live_view_shows_the_cloud_replicas_and_where_requests_went(
    cloud_gateway: Gateway, page: Page
) -> None:
    sign_in(page, cloud_gateway)
    expect(page).to_have_url(f"{cloud_gateway.url}/admin/live")
    expect(page.locator("tr[data-tier='cloud'] .pill")).to_have_text("ready")
    replica = page.locator("section[aria-labelledby='replicas-h'] tbody tr").first
    expect(replica).to_contain_text("cloud-0")
    expect(replica).to_contain_text("healthy")

    client = cloud_gateway.client(timeout=300)
    for model in ("cloud", "edge"):
        client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": f"Live view, {model} tier: say hi."}],
            max_tokens=8,
        )
    expect(page.locator("[data-share='cloud']")).to_be_visible(timeout=15_000)
    expect(page.locator("[data-share='edge']")).to_be_visible()
    recent = page.locator("table.decisions tbody tr")
    expect(recent.nth(0)).to_contain_text("edge")
    expect(recent.nth(1)).to_contain_text("cloud")
    screenshot(page, "live-cloud")


def test_a_policy_edited_in_the_browser_moves_the_next_request_between_tiers(
    cloud_gateway: Gateway, page: Page
) -> None:
    sign_in(page, cloud_gateway, path="/admin/tenants")
    create_tenant(page, cloud_gateway, "mover")
    _, key = create_key(page, "tiers")
    client = cloud_gateway.client(api_key=key, timeout=300)

    def tier_of_next_request() -> str:
        reply = client.chat.completions.with_raw_response.create(
            model="tiergate-auto", messages=[{"role": "user", "content": "Say one word."}], max_tokens=4
        )
        return reply.headers["x-tiergate-tier"]

    for strategy, tier in (("always:cloud", "cloud"), ("always:edge", "edge"), ("always:cloud", "cloud")):
        page.goto(f"{cloud_gateway.url}/admin/policies/mover")
        page.select_option("#f-strategy", strategy)
        page.click("text=Save policy")
        expect(page.locator("#saved")).to_be_visible()
        assert tier_of_next_request() == tier, strategy
    expect(page.locator("table.history tbody tr")).to_have_count(3)
