"""The cost page split by a cost tag: the selector offers the period's tag keys, the chart and the
"per team" table add up to the tenant's total exactly (the untagged requests as "(none)"), a tag
filter narrows both. A gateway of its own in front of a fake cloud: it starts in seconds."""

from __future__ import annotations

import csv
import io
import re
import sqlite3
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, screenshot, sign_in
from tests.browser.test_admin_ui import eventually
from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import start_cloud_gateway

TAGS = ["team=search, feature=autocomplete", "team=search", "team=ads", "team=ads", "team=ads", None]


@pytest.fixture(scope="module")
def tag_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM(delay_s=0.01) as fake:
        gw = start_cloud_gateway(tmp_path_factory.mktemp("cost-tags-ui"), fake.url)
        yield gw
        gw.stop()


def tenant_cost(gw: Gateway, tenant: str) -> tuple[int, int]:
    with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
        count, cost = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(cost_nusd), 0) FROM ledger "
            "JOIN tenants ON tenants.id = ledger.tenant_id WHERE tenants.name = ?",
            (tenant,),
        ).fetchone()
    return int(count), int(cost)


def tag_cost(gw: Gateway, tenant: str, key: str, value: str) -> int:
    with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
        (cost,) = db.execute(
            "SELECT COALESCE(SUM(ledger.cost_nusd), 0) FROM ledger JOIN tenants ON tenants.id = ledger.tenant_id "
            "JOIN ledger_tags t ON t.entry_id = ledger.entry_id AND t.key = ? AND t.value = ? WHERE tenants.name = ?",
            (key, value, tenant),
        ).fetchone()
    return int(cost)


def test_the_cost_page_split_by_a_tag_adds_up_to_the_tenant_total(
    tag_gateway: Gateway, page: Page, console: Console
) -> None:
    gw = tag_gateway
    console.expect("/admin/costs", 400)
    httpx.post(f"{gw.url}/admin/api/tenants", json={"name": "product"}, headers=gw.admin).raise_for_status()
    key = httpx.post(f"{gw.url}/admin/api/tenants/product/keys", headers=gw.admin).json()["key"]
    for i, tags in enumerate(TAGS):
        headers = {"Authorization": f"Bearer {key}"} | ({"X-Tiergate-Tags": tags} if tags else {})
        body = {
            "model": "cloud",
            "messages": [{"role": "user", "content": f"hello {i}" * (i + 1)}],
            "max_tokens": 4,
        }
        httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=30).raise_for_status()
    eventually(lambda: tenant_cost(gw, "product")[0] == len(TAGS), "the ledger rows")
    _, cost = tenant_cost(gw, "product")
    assert cost > 0

    sign_in(page, gw, path="/admin/costs?tenant=product")
    expect(page.locator("#by option[value='tag:team']")).to_have_count(1)  # the period's tag keys
    expect(page.locator("#by option[value='tag:feature']")).to_have_count(1)
    page.select_option("#by", "tag:team")
    page.click("text=Show")
    expect(page).to_have_url(re.compile(r"by=tag%3Ateam"))
    chart = page.locator("#cost-chart")
    expect(chart.locator("svg rect[data-series='ads']").first).to_be_attached()
    drawn = chart.locator("svg rect[data-cost-nusd]").evaluate_all(
        "rects => rects.map(r => Number(r.dataset.costNusd))"
    )
    assert sum(drawn) == cost
    split = page.locator("table.split tbody tr")
    expect(split).to_have_count(3)
    expect(split.locator("th")).to_have_text(["ads", "search", "(none)"])
    per_team = split.evaluate_all("rows => rows.map(r => Number(r.dataset.costNusd))")
    assert sum(per_team) == cost  # the untagged group included: exactly the tenant's total
    assert per_team[:2] == [tag_cost(gw, "product", "team", "ads"), tag_cost(gw, "product", "team", "search")]
    assert page.locator("[data-total='cost']").get_attribute("data-nusd") == str(cost)
    screenshot(page, "costs-by-tag")
    with page.expect_download() as download:  # the CSV: per day and team, the same total
        page.click("text=Download CSV")
    table = list(csv.DictReader(io.StringIO(download.value.path().read_text())))
    assert table[-1]["day"] == "total" and int(table[-1]["cost_nusd"]) == cost
    assert sum(int(r["cost_nusd"]) for r in table[:-1]) == cost
    assert sorted(r["tag:team"] for r in table[:-1]) == ["", "ads", "search"]

    # Only the search team, split by feature.
    page.select_option("#by", "tag:feature")
    page.fill("#tag", "team=search")
    page.click("text=Show")
    expect(page).to_have_url(re.compile(r"tag=team%3Dsearch"))
    expect(page.locator("table.split tbody tr th")).to_have_text(["autocomplete", "(none)"])
    search = tag_cost(gw, "product", "team", "search")
    assert page.locator("[data-total='cost']").get_attribute("data-nusd") == str(search)

    page.goto(f"{gw.url}/admin/costs?tenant=product&tag=team")
    expect(page.locator("#tag-error")).to_contain_text("key=value")
