"""The live view with the cloud pool: the real local vLLM replica, its state, and a request routed to it."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import screenshot, sign_in
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
