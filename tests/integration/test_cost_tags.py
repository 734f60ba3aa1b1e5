"""Cost by tag through a real gateway (in front of a fake cloud): the official openai client sends
``metadata`` and ``X-Tiergate-Tags`` (Chat Completions and the Responses API); the ledger rows carry
the tags; the admin API, its CSV and the CLI group and filter by tag and add up to the tenant's
total exactly; a malformed header is a 400 that names it; a spent tag budget refuses its tag's
requests (the policy says refuse) and no others."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import subprocess
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.conftest import TIERGATE, Gateway
from tests.fakes import FakeVLLM
from tests.faults._support import start_cloud_gateway


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    with FakeVLLM(delay_s=0.01) as fake:
        tables = "[router]\nbudget_refresh_s = 0.2\n"  # tag budgets re-read quickly
        gw = start_cloud_gateway(tmp_path_factory.mktemp("tags"), fake.url, tables=tables)
        yield gw
        gw.stop()


def admin(gw: Gateway, path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{gw.url}/admin/api{path}", params=params, headers=gw.admin, timeout=30)


def tagged_rows(gw: Gateway, tenant: str, want: int) -> list[tuple[int, str | None]]:
    """(cost, tags) of the tenant's ledger rows, once ``want`` of them are in the database."""
    deadline = time.monotonic() + 30
    while True:
        with sqlite3.connect(gw.data_dir / "tiergate.db") as db:
            rows = db.execute(
                "SELECT cost_nusd, tags FROM ledger JOIN tenants ON tenants.id = ledger.tenant_id "
                "WHERE tenants.name = ?",
                (tenant,),
            ).fetchall()
        if len(rows) >= want or time.monotonic() > deadline:
            return [(int(c), t) for c, t in rows]
        time.sleep(0.2)


def test_metadata_and_the_header_become_tags_and_reports_by_tag_add_up(gw: Gateway) -> None:
    httpx.post(f"{gw.url}/admin/api/tenants", json={"name": "tagged"}, headers=gw.admin).raise_for_status()
    key = httpx.post(f"{gw.url}/admin/api/tenants/tagged/keys", headers=gw.admin).json()["key"]
    client = gw.client(api_key=key, timeout=30)
    hello = [{"role": "user", "content": "hello"}]
    sent = [
        ({"team": "search", "feature": "autocomplete"}, None),
        ({"team": "search"}, "feature=summary"),
        ({"team": "ads"}, "team=search"),  # the header wins: search
        (None, "team=ads, user=u-42"),
        (None, None),  # untagged
    ]
    for metadata, header in sent:
        extra = {"X-Tiergate-Tags": header} if header else None
        client.chat.completions.create(
            model="cloud", messages=hello, max_tokens=4, metadata=metadata, extra_headers=extra
        )
    # A stream, and the Responses API: its metadata travels the same way.
    with client.chat.completions.create(
        model="cloud",
        messages=hello,
        max_tokens=4,
        stream=True,
        extra_headers={"X-Tiergate-Tags": "team=infra"},
    ) as stream:
        for _ in stream:
            pass
    client.responses.create(model="cloud", input="hello", max_output_tokens=4, metadata={"team": "ads"})

    rows = tagged_rows(gw, "tagged", 7)
    assert len(rows) == 7
    tags = sorted(json.dumps(json.loads(t), sort_keys=True) if t else "" for _, t in rows)
    assert tags == sorted(
        [
            '{"feature": "autocomplete", "team": "search"}',
            '{"feature": "summary", "team": "search"}',
            '{"team": "search"}',
            '{"team": "ads", "user": "u-42"}',
            "",
            '{"team": "infra"}',
            '{"team": "ads"}',
        ]
    )
    total = sum(c for c, _ in rows)
    assert total > 0

    report = admin(gw, "/reports/costs", tenant="tagged", group_by="tag:team").json()
    assert report["total"]["cost_nusd"] == total
    assert sum(r["cost_nusd"] for r in report["rows"]) == total  # exactly, the untagged group too
    by_team = {r["tag:team"]: r["requests"] for r in report["rows"]}
    assert by_team == {"ads": 2, "infra": 1, "search": 3, None: 1}
    assert report["tag_keys"] == ["feature", "team", "user"]

    search = admin(gw, "/reports/costs", tenant="tagged", tag="team=search", group_by="tag:feature").json()
    assert search["total"]["requests"] == 3
    assert {r["tag:feature"]: r["requests"] for r in search["rows"]} == {
        "autocomplete": 1,
        "summary": 1,
        None: 1,
    }
    assert sum(r["cost_nusd"] for r in search["rows"]) == search["total"]["cost_nusd"]

    table = admin(gw, "/reports/costs", tenant="tagged", group_by="day,tag:team", format="csv").text
    lines = list(csv.DictReader(io.StringIO(table)))
    assert lines[-1]["day"] == "total" and int(lines[-1]["cost_nusd"]) == total
    assert sum(int(r["cost_nusd"]) for r in lines[:-1]) == total
    assert {r["tag:team"] for r in lines[:-1]} == {"ads", "infra", "search", ""}

    config = str(gw.log_path.parent / "tiergate.toml")
    cli = subprocess.run(
        [
            TIERGATE,
            "report",
            "--tenant",
            "tagged",
            "--group-by",
            "tag:team",
            "--tag",
            "team=ads",
            "--config",
            config,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    printed = json.loads(cli.stdout)
    assert printed["total"]["requests"] == 2 and [r["tag:team"] for r in printed["rows"]] == ["ads"]
    assert admin(gw, "/reports/costs", group_by="tag:bad key").status_code == 400
    assert admin(gw, "/reports/costs", tag="team").status_code == 400


@pytest.mark.parametrize(
    "header",
    [
        "team",
        "team=",
        "team=a, team=b",
        ",".join(f"k{i}=v" for i in range(17)),
        "team=" + "x" * 129,
        "bad key=v",
    ],
)
def test_a_malformed_header_is_a_400_naming_it(gw: Gateway, header: str) -> None:
    client = gw.client(timeout=30)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model="cloud",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=4,
            extra_headers={"X-Tiergate-Tags": header},
        )
    error = caught.value.body
    assert isinstance(error, dict) and error["param"] == "X-Tiergate-Tags"
    assert "X-Tiergate-Tags" in error["message"]


def test_a_header_sent_twice_counts_both(gw: Gateway) -> None:
    headers = [
        ("Authorization", f"Bearer {gw.api_key}"),
        ("X-Tiergate-Tags", "team=a"),
        ("X-Tiergate-Tags", "team=b"),
    ]
    body = {"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    response = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=30)
    assert response.status_code == 400 and "twice" in response.json()["error"]["message"]


def test_a_spent_tag_budget_refuses_that_tags_requests_only(gw: Gateway) -> None:
    httpx.post(f"{gw.url}/admin/api/tenants", json={"name": "budgeted"}, headers=gw.admin).raise_for_status()
    key = httpx.post(f"{gw.url}/admin/api/tenants/budgeted/keys", headers=gw.admin).json()["key"]
    policy = {
        "budget": {"on_exhausted": "refuse"},
        "tag_budgets": [{"tag": "team=search", "amount_usd": 1e-9, "period": "day"}],  # one request spends it
    }
    put = httpx.put(f"{gw.url}/admin/api/tenants/budgeted/policy", json=policy, headers=gw.admin)
    assert put.status_code == 200, put.text
    client = gw.client(
        api_key=key, timeout=30
    )  # tiergate-auto: the router decides (a named tier is not checked)

    def ask(tags: str | None) -> None:
        client.chat.completions.create(
            model="tiergate-auto",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=4,
            extra_headers={"X-Tiergate-Tags": tags} if tags else None,
        )

    ask("team=search")  # within the budget until the ledger says otherwise
    deadline = time.monotonic() + 30
    while True:
        try:
            ask("team=search")
        except openai.RateLimitError as exc:
            assert "tagged team=search" in str(exc) and "budget spent" in str(exc)
            assert exc.type == exc.code == "insufficient_quota"  # OpenAI's quota error, not a rate
            break
        assert time.monotonic() < deadline, "the spent tag budget never refused"
        time.sleep(0.2)
    ask("team=ads")  # other tags and untagged requests go on
    ask(None)
    client.chat.completions.create(  # metadata tags count the same
        model="tiergate-auto",
        messages=[{"role": "user", "content": "hi"}],
        max_tokens=4,
        metadata={"team": "ads"},
    )
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model="tiergate-auto",
            messages=[{"role": "user", "content": "hi"}],
            max_tokens=4,
            metadata={"team": "search"},
        )
