"""The admin UI in a real headless Chromium against a real gateway (edge tier, llama.cpp)."""

from __future__ import annotations

import csv
import io
import re
import sqlite3
import time
from collections.abc import Callable

import httpx
import openai
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import PHONE, Console, screenshot, sign_in
from tests.conftest import Gateway

PROMPT = [{"role": "user", "content": "Name one colour."}]


def chat(gateway: Gateway, key: str, text: str = "Name one colour.") -> openai.types.chat.ChatCompletion:
    client = gateway.client(api_key=key, timeout=120)
    return client.chat.completions.create(
        model="tiergate-auto", messages=[{"role": "user", "content": text}], max_tokens=8
    )


def eventually(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def ledger_sums(gateway: Gateway, tenant: str) -> tuple[int, int, int]:
    """(rows, cost, counterfactual) of one tenant, read from the ledger database itself."""
    with sqlite3.connect(gateway.data_dir / "tiergate.db") as db:
        row = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(cost_nusd), 0), COALESCE(SUM(counterfactual_nusd), 0) "
            "FROM ledger JOIN tenants ON tenants.id = ledger.tenant_id WHERE tenants.name = ?",
            (tenant,),
        ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def create_tenant(page: Page, gateway: Gateway, name: str) -> None:
    page.goto(f"{gateway.url}/admin/tenants")
    page.fill("#name", name)
    page.click("text=Create tenant")
    expect(page).to_have_url(f"{gateway.url}/admin/tenants/{name}")


def create_key(page: Page, label: str) -> tuple[str, str]:
    """Create a key on the open tenant page: (its id, the key shown once)."""
    page.fill("#label", label)
    page.click("text=Create key")
    shown = page.locator("#new-key-value")
    expect(shown).to_be_visible()
    return str(shown.get_attribute("data-new-key")), shown.input_value()


def test_sign_in_then_the_live_view_shows_tiers_and_refreshes_with_new_decisions(
    ui_gateway: Gateway, page: Page, context: BrowserContext
) -> None:
    sign_in(page, ui_gateway)
    expect(page).to_have_url(f"{ui_gateway.url}/admin/live")
    expect(page.locator("tr[data-tier='edge'] .pill")).to_have_text("ready")
    # where the engine runs and how fast it timed itself at load (no GPU here: the CPU)
    expect(page.locator("tr[data-tier='edge'] .device")).to_contain_text(
        re.compile(r"^cpu \(\d+ tok/s alone\)")
    )
    cookie = next(c for c in context.cookies() if c["name"] == "tiergate_admin")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/admin"

    reply = chat(ui_gateway, ui_gateway.api_key, "Live view check: name one fruit.")
    assert reply.choices[0].message.content is not None
    # No reload: the panel refreshes itself and shows the decision with its reason.
    decisions = page.locator("table.decisions tbody tr")
    expect(decisions.first).to_contain_text("default", timeout=15_000)
    expect(decisions.first).to_contain_text("edge")
    expect(page.locator("[data-share='edge']")).to_have_text("100 %")
    expect(page.locator("#live-status")).to_contain_text("Updated")
    screenshot(page, "live")

    page.set_viewport_size(PHONE)
    screenshot(page, "live-phone", full_page=False)


def test_a_wrong_key_or_a_tenant_key_cannot_sign_in(
    ui_gateway: Gateway, page: Page, console: Console
) -> None:
    console.expect("/admin/login", 401)
    console.expect("/admin/login", 403)
    page.goto(f"{ui_gateway.url}/admin/login")
    screenshot(page, "sign-in", full_page=False)
    sign_in(page, ui_gateway, key="tg_000000000000_not-a-key")
    expect(page.locator("#key-error")).to_have_text("That is not a valid admin key.")
    expect(page.locator("#key")).to_have_attribute("aria-invalid", "true")
    sign_in(page, ui_gateway, key=ui_gateway.api_key)
    expect(page.locator("#key-error")).to_contain_text("belongs to a tenant")
    page.goto(f"{ui_gateway.url}/admin/tenants")
    expect(page).to_have_url(re.compile(r"/admin/login\?next=/admin/tenants$"))


def test_signed_out_access_is_refused(ui_gateway: Gateway, browser: Browser) -> None:
    url = ui_gateway.url
    for path in ("/admin/live", "/admin/tenants", "/admin/tenants/default", "/admin/costs"):
        answer = httpx.get(url + path)
        assert answer.status_code == 303 and answer.headers["location"].startswith("/admin/login?next=")
    for path in ("/admin/data/live", "/admin/data/costs", "/admin/live/panel", "/admin/costs.csv"):
        answer = httpx.get(url + path)
        assert answer.status_code == 401, path
        assert answer.json()["error"]["type"] == "invalid_request_error"
    forged = httpx.get(url + "/admin/data/live", cookies={"tiergate_admin": "made-up"})
    assert forged.status_code == 401

    # Signed in, then signed out: the old session cookie no longer opens anything.
    ctx = browser.new_context()
    try:
        page = ctx.new_page()
        sign_in(page, ui_gateway)
        expect(page).to_have_url(f"{url}/admin/live")
        token = next(c["value"] for c in ctx.cookies() if c["name"] == "tiergate_admin")
        assert httpx.get(url + "/admin/data/live", cookies={"tiergate_admin": token}).status_code == 200
        page.click("text=Sign out")
        expect(page).to_have_url(f"{url}/admin/login")
        assert httpx.get(url + "/admin/data/live", cookies={"tiergate_admin": token}).status_code == 401
        page.goto(f"{url}/admin/costs")
        expect(page).to_have_url(re.compile(r"/admin/login\?next=/admin/costs$"))
    finally:
        ctx.close()


def test_form_posts_without_the_csrf_token_are_refused(
    ui_gateway: Gateway, page: Page, context: BrowserContext
) -> None:
    sign_in(page, ui_gateway)
    expect(page).to_have_url(f"{ui_gateway.url}/admin/live")
    post = context.request.post  # the browser's own cookies, a form post like any page would send
    url = ui_gateway.url

    missing = post(f"{url}/admin/tenants", form={"name": "no-csrf"}, max_redirects=0)
    wrong = post(f"{url}/admin/tenants", form={"name": "no-csrf", "csrf_token": "guess"}, max_redirects=0)
    assert missing.status == 403 and wrong.status == 403
    assert "CSRF" in missing.text()
    token = page.locator("form.signout input[name=csrf_token]").input_value()
    elsewhere = post(
        f"{url}/admin/tenants",
        form={"name": "no-csrf", "csrf_token": token},
        headers={"Origin": "http://attacker.example"},
        max_redirects=0,
    )
    assert elsewhere.status == 403
    revoke = post(f"{url}/admin/keys/000000000000/revoke", form={}, max_redirects=0)
    sign_out = post(f"{url}/admin/logout", form={}, max_redirects=0)
    sign_in_post = post(f"{url}/admin/login", form={"key": ui_gateway.admin_key}, max_redirects=0)
    assert (revoke.status, sign_out.status, sign_in_post.status) == (403, 403, 403)

    tenants = httpx.get(f"{url}/admin/api/tenants", headers=ui_gateway.admin).json()["data"]
    assert "no-csrf" not in {t["name"] for t in tenants}
    # The session is still good: a refused post does not sign out, and the real form works.
    ok = post(f"{url}/admin/tenants", form={"name": "with-csrf", "csrf_token": token}, max_redirects=0)
    assert ok.status == 303 and ok.headers["location"] == "/admin/tenants/with-csrf"


def test_create_a_tenant_and_a_key_then_revoke_it_and_the_key_is_refused(
    ui_gateway: Gateway, page: Page, console: Console
) -> None:
    console.expect("/admin/tenants", 400)
    sign_in(page, ui_gateway, path="/admin/tenants")
    expect(page).to_have_url(f"{ui_gateway.url}/admin/tenants")
    page.fill("#name", "Not A Name")
    page.fill("#requests_per_min", "ten")
    page.click("text=Create tenant")
    expect(page.locator("#name-error")).to_contain_text("invalid tenant name")
    expect(page.locator("#requests_per_min-error")).to_contain_text("whole number")
    expect(page.locator("#name")).to_have_value("Not A Name")  # what was typed stays
    screenshot(page, "tenants")

    page.fill("#name", "research")
    page.fill("#requests_per_min", "600")
    page.click("text=Create tenant")
    expect(page).to_have_url(f"{ui_gateway.url}/admin/tenants/research")
    key_id, key = create_key(page, "notebook")
    assert key.startswith(f"tg_{key_id}_")
    assert chat(ui_gateway, key).choices  # the new key works

    page.goto(f"{ui_gateway.url}/admin/tenants/research")
    expect(page.locator("#new-key-value")).to_have_count(0)  # shown once only
    row = page.locator(f"tr[data-key='{key_id}']")
    expect(row).to_contain_text("active")
    row.get_by_role("button", name=f"Revoke key {key_id}").click()
    expect(row).to_contain_text("revoked")
    with pytest.raises(openai.AuthenticationError, match="revoked"):
        chat(ui_gateway, key)
    screenshot(page, "tenant")


def test_the_cost_chart_draws_the_ledger_totals_and_the_csv_matches(
    ui_gateway: Gateway, page: Page, console: Console
) -> None:
    console.expect("/admin/costs", 400)
    sign_in(page, ui_gateway, path="/admin/tenants")
    create_tenant(page, ui_gateway, "finance")
    _, key = create_key(page, "reports")
    for i in range(3):
        chat(ui_gateway, key, f"Cost report check {i}: name one animal.")
    eventually(lambda: ledger_sums(ui_gateway, "finance")[0] == 3, "3 ledger rows for finance")
    rows, cost, counterfactual = ledger_sums(ui_gateway, "finance")
    assert cost > 0 and counterfactual > cost  # the edge tier is cheaper than the cloud

    page.goto(f"{ui_gateway.url}/admin/costs?tenant=finance")
    chart = page.locator("#cost-chart")
    expect(chart.locator("svg rect[data-cost-nusd]").first).to_be_attached()
    drawn = chart.locator("svg rect[data-cost-nusd]").evaluate_all(
        "rects => rects.map(r => Number(r.dataset.costNusd))"
    )
    dots = chart.locator("svg circle[data-counterfactual-nusd]").evaluate_all(
        "dots => dots.map(d => Number(d.dataset.counterfactualNusd))"
    )
    assert sum(drawn) == cost and sum(dots) == counterfactual
    assert int(str(chart.get_attribute("data-drawn-nusd"))) == cost
    assert page.locator("[data-total='cost']").get_attribute("data-nusd") == str(cost)
    assert page.locator("[data-total='savings']").get_attribute("data-nusd") == str(counterfactual - cost)
    expect(page.locator("table.costs tbody tr")).to_have_count(1)  # one day, one tier
    expect(page.locator("table.costs tbody tr")).to_contain_text("edge")
    screenshot(page, "costs")

    with page.expect_download() as download:
        page.click("text=Download CSV")
    table = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    total = table[-1]
    assert total["day"] == "total" and int(total["cost_nusd"]) == cost and int(total["requests"]) == rows
    assert sum(int(r["cost_nusd"]) for r in table[:-1]) == cost

    # Split by model: other bars, the same total.
    page.select_option("#by", "model")
    page.click("text=Show")
    expect(page).to_have_url(re.compile(r"by=model"))
    expect(chart.locator("svg rect[data-series='edge-smollm2-135m']").first).to_be_attached()
    by_model = chart.locator("svg rect[data-cost-nusd]").evaluate_all(
        "rects => rects.map(r => Number(r.dataset.costNusd))"
    )
    assert sum(by_model) == cost
    page.set_viewport_size(PHONE)
    screenshot(page, "costs-phone", full_page=False)

    page.goto(f"{ui_gateway.url}/admin/costs?tenant=finance&since=yesterday")
    expect(page.locator("#since-error")).to_contain_text("ISO date")


def test_every_page_is_reachable_with_the_keyboard(ui_gateway: Gateway, page: Page) -> None:
    sign_in(page, ui_gateway)
    expect(page).to_have_url(f"{ui_gateway.url}/admin/live")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    for label, path in (
        ("Tenants & keys", "/admin/tenants"),
        ("Costs", "/admin/costs"),
        ("Live", "/admin/live"),
    ):
        for _ in range(12):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.textContent.trim()") == label:
                break
        else:
            raise AssertionError(f"Tab never reached {label!r}")
        page.keyboard.press("Enter")
        expect(page).to_have_url(f"{ui_gateway.url}{path}")
    # Focus is drawn visibly (an outline), not hidden.
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline not in ("", "none")
