"""Editing a tenant's routing policy in the browser: field errors, the next request follows the
change, the audit history, rollback."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, screenshot, sign_in
from tests.browser.test_admin_ui import create_key, create_tenant
from tests.conftest import Gateway

REPEATABLE = {
    "model": "tiergate-auto",
    "messages": [{"role": "user", "content": "Policy check: name one planet."}],
    "max_tokens": 8,
    "temperature": 0,  # deterministic: the result cache may answer a repeat
}


def ask(gateway: Gateway, key: str, body: dict[str, object] = REPEATABLE) -> httpx.Response:
    answer = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    return answer


def test_edit_a_policy_and_the_next_request_follows_it_then_roll_it_back(
    ui_gateway: Gateway, page: Page, console: Console
) -> None:
    console.expect("/admin/policies/ops", 400)
    sign_in(page, ui_gateway, path="/admin/tenants")
    create_tenant(page, ui_gateway, "ops")
    _, key = create_key(page, "policy-test")
    ask(ui_gateway, key)
    assert ask(ui_gateway, key).headers["x-tiergate-cache"] == "hit"  # the default policy caches

    page.goto(f"{ui_gateway.url}/admin/policies")
    screenshot(page, "policies")
    page.get_by_role("link", name="ops", exact=True).click()
    expect(page).to_have_url(f"{ui_gateway.url}/admin/policies/ops")
    expect(page.locator("#f-cache")).to_be_checked()
    # A checkbox's help is shown under it and read with it (it was dropped before).
    sampled = page.locator("#f-semantic_cache-allow_sampling")
    expect(sampled).to_have_attribute("aria-describedby", "f-semantic_cache-allow_sampling-help")
    expect(page.locator("#f-semantic_cache-allow_sampling-help")).to_have_text(
        "temperature above 0 without a seed"
    )
    expect(page.locator("#f-semantic_cache-enabled-help")).to_contain_text("near misses")

    # Bad input is refused, with the message next to the field and what was typed kept.
    page.fill("#f-quality_floor", "high")
    page.click("text=Save policy")
    expect(page.locator("#f-quality_floor-error")).to_have_text("a number")
    expect(page.locator("#f-quality_floor")).to_have_attribute("aria-invalid", "true")
    page.fill("#f-quality_floor", "0.2")
    page.fill("#f-latency-percentile", "20")
    page.click("text=Save policy")
    expect(page.locator("#f-latency-percentile-error")).to_contain_text(">= 50")
    expect(page.locator("#f-quality_floor")).to_have_value("0.2")
    assert (
        httpx.get(f"{ui_gateway.url}/admin/api/tenants/ops/policy", headers=ui_gateway.admin).json()[
            "version"
        ]
        == 0
    )

    fresh = REPEATABLE | {"temperature": 0.7}  # not cacheable: always routed
    assert "always-edge" not in ask(ui_gateway, key, fresh).headers["x-tiergate-route-reason"]

    # Version 1: another strategy and a latency objective. Version 2: no result cache.
    page.select_option("#f-strategy", "always:edge")
    page.fill("#f-latency-percentile", "95")
    page.fill("#f-latency-total_ms", "800")
    page.click("text=Save policy")
    expect(page.locator("#saved")).to_be_visible()
    routed = ask(ui_gateway, key, fresh).headers
    assert (routed["x-tiergate-tier"], routed["x-tiergate-route-reason"]) == (
        "edge",
        "edge: always-edge strategy",
    )
    page.locator("#f-cache").uncheck()
    page.click("text=Save policy")
    expect(page.locator("#saved")).to_be_visible()
    expect(page.locator("#f-cache")).not_to_be_checked()

    # The very next request is routed by it: the cache is not consulted.
    assert ask(ui_gateway, key).headers["x-tiergate-cache"] == "bypass"

    history = page.locator("table.history tbody tr")
    expect(history).to_have_count(2)
    newest = history.nth(0)
    expect(newest).to_contain_text("cache: on → off")
    expect(newest).to_contain_text("admin:")
    expect(history.nth(1)).to_contain_text("latency.total_ms: 60000 → 800")
    screenshot(page, "policy")

    # Roll back to version 1: the cache answers again, and the rollback is itself a version.
    page.get_by_role("button", name="Roll back to version 1").click()
    expect(page.locator("#saved")).to_be_visible()
    expect(page.locator("#f-cache")).to_be_checked()
    expect(history).to_have_count(3)
    expect(history.nth(0)).to_contain_text("rollback")
    assert ask(ui_gateway, key).headers["x-tiergate-cache"] == "hit"
    stored = httpx.get(f"{ui_gateway.url}/admin/api/tenants/ops/policy", headers=ui_gateway.admin).json()
    assert stored["version"] == 3 and stored["policy"]["latency"]["total_ms"] == 800
    audit = httpx.get(
        f"{ui_gateway.url}/admin/api/tenants/ops/policy/history", headers=ui_gateway.admin
    ).json()
    assert [c["action"] for c in audit["data"]] == ["rollback", "set", "set"]
    assert audit["data"][1]["before"]["cache"] is True and audit["data"][1]["after"]["cache"] is False


def test_a_stale_editor_is_refused_instead_of_overwriting(
    ui_gateway: Gateway, page: Page, console: Console
) -> None:
    console.expect("/admin/policies/stale", 409)
    sign_in(page, ui_gateway, path="/admin/tenants")
    create_tenant(page, ui_gateway, "stale")
    page.goto(f"{ui_gateway.url}/admin/policies/stale")
    # Someone else changes the policy after this page was opened.
    changed = httpx.put(
        f"{ui_gateway.url}/admin/api/tenants/stale/policy", json={"cache": False}, headers=ui_gateway.admin
    )
    assert changed.status_code == 200
    page.fill("#f-latency-total_ms", "900")
    page.click("text=Save policy")
    expect(page.locator("#form-error")).to_contain_text("someone changed it")
    stored = httpx.get(f"{ui_gateway.url}/admin/api/tenants/stale/policy", headers=ui_gateway.admin).json()
    assert stored["version"] == 1 and stored["policy"]["cache"] is False
