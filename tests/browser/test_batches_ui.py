"""The batches page: a tenant's batch, with its progress and its cost so far, seen by an operator."""

from __future__ import annotations

import json
import time
import uuid

import httpx
from playwright.sync_api import Page, expect

from tests.browser.conftest import sign_in
from tests.conftest import Gateway


def _tenant(gw: Gateway) -> tuple[str, str]:
    """A new tenant and an inference key of it."""
    name = f"batches-{uuid.uuid4().hex[:6]}"
    httpx.post(f"{gw.url}/admin/api/tenants", json={"name": name}, headers=gw.admin).raise_for_status()
    return name, httpx.post(f"{gw.url}/admin/api/tenants/{name}/keys", headers=gw.admin).json()["key"]


def _finished_batch(gw: Gateway, key: str) -> str:
    client = gw.client(api_key=key, timeout=60)
    lines = [
        {
            "custom_id": f"e{i}",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "all-MiniLM-L6-v2", "input": f"row {i}"},
        }
        for i in range(3)
    ]
    data = "".join(json.dumps(x) + "\n" for x in lines).encode()
    uploaded = client.files.create(file=("rows.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    deadline = time.monotonic() + 60
    while client.batches.retrieve(batch.id).status != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    return batch.id


def test_the_batches_page_shows_a_batch_and_its_progress(ui_gateway: Gateway, page: Page) -> None:
    gw = ui_gateway
    name, key = _tenant(gw)
    batch_id = _finished_batch(gw, key)
    sign_in(page, gw)
    page.goto(f"{gw.url}/admin/batches")
    row = page.locator(f"tr[data-batch='{batch_id}']")
    expect(row).to_contain_text(name)
    expect(row).to_contain_text("completed")
    expect(row).to_contain_text("100 %")
    expect(page.get_by_role("link", name="Batches")).to_have_attribute("aria-current", "page")
    shown = page.request.get(f"{gw.url}/admin/data/batches").json()
    mine = next(b for b in shown["batches"] if b["id"] == batch_id)
    assert (mine["total"], mine["completed"], mine["failed"]) == (3, 3, 0)
    assert mine["tenant"] == name and mine["progress"] == 1.0
