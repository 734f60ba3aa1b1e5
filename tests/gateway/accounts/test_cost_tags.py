"""Cost tags: the X-Tiergate-Tags header and metadata as tags; reports grouped and filtered by tag
that add up exactly to the tenant's total, on SQLite and PostgreSQL; a v3 database migrates."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import msgspec
import pytest
from sqlalchemy import Engine, create_engine, func, select

import router
from gateway.accounts.budgets import BudgetBook, spent_tag_usd
from gateway.accounts.ledger import (
    DEFAULT_PRICES,
    NANO,
    LedgerRow,
    ReportQuery,
    cost_report,
    decode_tags,
    encode_tags,
    insert_rows,
    parse_header,
    report_csv,
    request_tags,
)
from gateway.accounts.storage import SCHEMA_VERSION, ledger, ledger_tags, open_database, tenants
from gateway.accounts.storage._schema import schema_version
from gateway.errors import InvalidRequest
from gateway.ops.metrics import Metrics
from gateway.pipeline.chat import RequestContext
from gateway.pipeline.routing_service import RouterSettings, RoutingService, tier_prices
from gateway.wire.chat import parse_chat_request
from tests.gateway.accounts.test_ledger import row
from tests.gateway.pipeline.test_routing import Tier, body
from tests.pipeline import chat_service, complete


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return open_database(f"sqlite:///{tmp_path / 'db.sqlite'}")


def test_the_header_is_comma_separated_key_value_pairs() -> None:
    assert parse_header(" team=search, feature = autocomplete ,,user=u-42 ") == {
        "team": "search",
        "feature": "autocomplete",
        "user": "u-42",
    }
    assert parse_header("") == {}
    assert parse_header("a:b/c.d_e-f=with spaces and = signs") == {"a:b/c.d_e-f": "with spaces and = signs"}
    # UTF-8 as the ASGI server hands it over (latin-1 decoded bytes)
    assert parse_header("city=Zürich".encode().decode("latin-1")) == {"city": "Zürich"}


@pytest.mark.parametrize(
    "header",
    [
        "team",  # no =
        "=search",  # no key
        "team=",  # no value
        "te am=search",  # a space in the key
        "team=search, team=ads",  # twice
        "k" * 65 + "=v",  # key too long
        "team=" + "v" * 129,  # value too long: refused, not cut
        ",".join(f"k{i}=v" for i in range(17)),  # 17 tags
        "team=a\x01b",  # a control character
        "team=\xff\xfe",  # not UTF-8
    ],
)
def test_a_malformed_header_is_refused_naming_it(header: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_header(header)
    assert caught.value.param == "X-Tiergate-Tags"
    assert "X-Tiergate-Tags" in caught.value.message


def test_metadata_pairs_are_tags_and_the_header_wins() -> None:
    metadata = {"team": "ads", "feature": "chat", "note": "x" * 300, "bad key": "v", "empty": ""}
    tags = request_tags(metadata, "team=search")
    assert tags == {"team": "search", "feature": "chat"}  # too long, bad key and empty stay metadata only
    assert request_tags(None, None) == {}
    assert encode_tags(tags) == '{"feature":"chat","team":"search"}'
    assert encode_tags({}) is None
    with pytest.raises(InvalidRequest) as caught:  # 16 from metadata + 1 more from the header
        request_tags({f"m{i}": "v" for i in range(16)}, "extra=1")
    assert caught.value.param == "X-Tiergate-Tags"
    assert len(request_tags({f"m{i}": "v" for i in range(16)}, "m0=header")) == 16  # overrides: fine


def _tagged(tenant_id: int, count: int, seed: int) -> list[LedgerRow]:
    chance = random.Random(seed)
    rows = []
    for _ in range(count):
        tags = {}
        if chance.random() < 0.7:
            tags["team"] = chance.choice(["search", "ads", "infra"])
        if chance.random() < 0.5:
            tags["feature"] = chance.choice(["autocomplete", "summary"])
        day = f"2026-01-0{chance.randint(1, 3)}"
        tier = chance.choice(["edge", "cloud"])
        status = 200 if chance.random() < 0.9 else 502
        cost = chance.randint(0, 10**12)  # large nano-USD amounts: sums must stay exact integers
        rows.append(row(tenant_id, tier=tier, day=day, cost=cost, status=status, tags=encode_tags(tags)))
    return rows


def _reconciles(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(ledger_tags.delete())
        conn.execute(ledger.delete())
        if not conn.execute(select(tenants.c.id).where(tenants.c.name == "a")).first():
            conn.execute(tenants.insert(), [{"name": "a", "created_at": 0}, {"name": "b", "created_at": 0}])
        ids = dict(conn.execute(select(tenants.c.name, tenants.c.id)).all())
    mine, theirs = _tagged(ids["a"], 600, 1), _tagged(ids["b"], 200, 2)
    insert_rows(engine, mine + theirs)
    insert_rows(engine, mine[:50])  # a replay adds no tag twice
    total = cost_report(engine, ReportQuery.parse("a", None, None, ""), ids["a"])["total"]
    assert total["cost_nusd"] == sum(r.cost_nusd for r in mine)
    for group_by in ("tag:team", "tag:feature", "day,tag:team", "tag:team,tag:feature", "tier,tag:team"):
        report = cost_report(engine, ReportQuery.parse("a", None, None, group_by), ids["a"])
        for measure in ("cost_nusd", "counterfactual_nusd", "requests", "answered", "prompt_tokens"):
            assert sum(r[measure] for r in report["rows"]) == total[measure] == report["total"][measure]
    by_team = cost_report(engine, ReportQuery.parse("a", None, None, "tag:team"), ids["a"])
    expected: dict[str | None, int] = {}
    for r in mine:
        team = decode_tags(r.tags).get("team")
        expected[team] = expected.get(team, 0) + r.cost_nusd
    assert {r["tag:team"]: r["cost_nusd"] for r in by_team["rows"]} == expected
    assert by_team["rows"][-1]["tag:team"] is None  # the untagged group, last
    assert by_team["tag_keys"] == ["feature", "team"]
    # The filter: exactly the rows with the tag; grouped by another key, it still adds up.
    search = cost_report(engine, ReportQuery.parse("a", None, None, "tag:feature", "team=search"), ids["a"])
    wanted = [r for r in mine if r.tags and '"team":"search"' in r.tags]
    assert search["total"]["cost_nusd"] == sum(r.cost_nusd for r in wanted)
    assert search["total"]["requests"] == len(wanted)
    assert sum(r["cost_nusd"] for r in search["rows"]) == search["total"]["cost_nusd"]
    window = cost_report(engine, ReportQuery.parse("a", "2026-01-02", "2026-01-02", "", "team=ads"), ids["a"])
    assert window["total"]["cost_nusd"] == sum(
        r.cost_nusd for r in mine if r.day == "2026-01-02" and r.tags and '"team":"ads"' in r.tags
    )
    # What a tag budget sums: the same rows.
    assert spent_tag_usd(engine, "a", ("team", "search"), 0) * NANO == pytest.approx(
        sum(r.cost_nusd for r in wanted)
    )
    # Every tenant, by tenant and tag: adds up to everyone's total.
    everyone = cost_report(engine, ReportQuery.parse(None, None, None, "tenant,tag:team"), None)
    assert sum(r["cost_nusd"] for r in everyone["rows"]) == sum(r.cost_nusd for r in mine + theirs)
    csv = report_csv(by_team).splitlines()
    assert csv[0].startswith("tag:team,requests,") and csv[-1].startswith(f"total,{total['requests']},")


def test_reports_by_tag_reconcile_exactly_with_the_tenant_total(engine: Engine) -> None:
    _reconciles(engine)


def test_reports_by_tag_reconcile_on_postgresql(postgres_url: str) -> None:
    engine = open_database(postgres_url)
    try:
        _reconciles(engine)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    ("group_by", "tag", "param"),
    [
        ("tag:", None, "group_by"),
        ("tag:bad key", None, "group_by"),
        ("tag:a,tag:b,tag:c,tag:d,tag:e", None, "group_by"),
        ("tag:team,tag:team", None, "group_by"),
        ("", "team", "tag"),
        ("", "=search", "tag"),
        ("", "team=", "tag"),
    ],
)
def test_malformed_tag_report_parameters_are_400(group_by: str, tag: str, param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        ReportQuery.parse("a", None, None, group_by, tag)
    assert caught.value.param == param


def test_a_v3_database_gains_tags(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    old = create_engine(url)
    with old.begin() as conn:  # a v3 ledger: no tags column, no ledger_tags table
        conn.exec_driver_sql("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at FLOAT)")
        conn.exec_driver_sql("INSERT INTO schema_version VALUES (1, 0), (2, 0), (3, 0)")
        columns = ", ".join(
            f"{c.name} {c.type.compile(old.dialect)}" for c in ledger.columns if c.name != "tags"
        )
        conn.exec_driver_sql(f"CREATE TABLE ledger ({columns}, PRIMARY KEY (entry_id))")
    old.dispose()
    engine = open_database(url)
    with engine.connect() as conn:
        assert conn.execute(select(func.max(schema_version.c.version))).scalar() == SCHEMA_VERSION
    insert_rows(engine, [row(1, cost=5, tags=encode_tags({"team": "search"})), row(1, cost=7)])
    report = cost_report(engine, ReportQuery.parse(None, None, None, "tag:team"), None)
    assert [(r["tag:team"], r["cost_nusd"]) for r in report["rows"]] == [("search", 5), (None, 7)]


async def test_a_spent_tag_budget_governs_the_requests_carrying_that_tag(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.execute(tenants.insert(), [{"name": "acme", "created_at": 0}])
    now = 1_781_524_800.0  # 2026-06-15 12:00 UTC: the rows an hour before are in the same day
    day = time.strftime("%Y-%m-%d", time.gmtime(now))
    search, ads = encode_tags({"team": "search"}), encode_tags({"team": "ads"})
    rows = [row(1, cost=2 * NANO, tags=search), row(1, cost=NANO // 2, tags=ads), row(1, cost=NANO)]
    insert_rows(engine, [msgspec.structs.replace(r, ts=now - 3600, day=day) for r in rows])
    assert spent_tag_usd(engine, "acme", ("team", "search"), now - 7200) == 2.0
    policy = router.TenantPolicy(
        budget=router.Budget(amount_usd=100, on_exhausted="refuse"),
        tag_budgets=(
            router.TagBudget(tag="team=search", amount_usd=1.5, period="day"),
            router.TagBudget(tag="team=ads", amount_usd=1.0),
        ),
    )
    book = BudgetBook(engine, lambda _t: policy, refresh_s=60, clock=lambda: now)
    for tags in ({"team": "search"}, {"team": "ads"}, None):
        book.governing("acme", policy, tags)  # noted: read on the next refresh
    await book.refresh()
    governed, spend, tag = book.governing("acme", policy, {"team": "search", "feature": "x"})
    assert tag == "team=search" and spend is not None and spend.spent_usd == 2.0
    assert governed.budget == router.Budget(amount_usd=1.5, period="day", on_exhausted="refuse")
    for tags in ({"team": "ads"}, {"team": "other"}, None):  # within its budget, or none: the tenant's
        governed, spend, tag = book.governing("acme", policy, tags)
        assert governed is policy and tag is None and spend is not None and spend.spent_usd == 3.5


@pytest.mark.parametrize(
    ("tag_budgets", "field"),
    [
        ([{"tag": "team", "amount_usd": 1}], "tag_budgets.0.tag"),
        ([{"tag": "team=search", "amount_usd": 0}], "tag_budgets.0.amount_usd"),
        ([{"tag": "team=a,b", "amount_usd": 1}], "tag_budgets.0.tag"),
        ([{"tag": "team=a", "amount_usd": 1}] * 2, "tag_budgets"),
    ],
)
def test_a_malformed_tag_budget_names_its_field(tag_budgets: list[dict[str, object]], field: str) -> None:
    with pytest.raises(router.PolicyInvalid) as caught:
        policy = router.decode_policy(json.dumps({"tag_budgets": tag_budgets}))
        router.check_policy(policy, ["edge"])
    assert caught.value.field == field


async def test_the_router_sends_a_spent_tags_requests_to_the_cheapest_tier(
    tmp_path: Path, engine: Engine
) -> None:
    with engine.begin() as conn:
        conn.execute(tenants.insert(), [{"name": "acme", "created_at": 0}])
    now = time.time()
    spent = row(1, cost=2 * NANO, tags=encode_tags({"team": "search"}))
    insert_rows(engine, [msgspec.structs.replace(spent, ts=now - 1)])
    policy = router.TenantPolicy(
        quality_floor=0.6,  # only the cloud (0.7) meets it: the dearer tier, unless a budget is spent
        budget=router.Budget(on_exhausted="cheapest"),
        tag_budgets=(router.TagBudget(tag="team=search", amount_usd=1.0),),  # a month
    )
    edge, cloud = Tier("edge", 0.4), Tier("cloud", 0.7)
    tiers = {"edge": edge, "cloud": cloud}
    book = BudgetBook(engine, lambda _t: policy, refresh_s=60)
    routing = RoutingService(
        RouterSettings(exploration=0.0),
        router.AutoRule(),
        tier_prices(DEFAULT_PRICES, tiers),
        tmp_path,
        policy_of=lambda _t: policy,
        budgets=book,
    )
    chat = chat_service(tiers, router.AutoRule(), Metrics(), routing=routing)

    async def route(tags: dict[str, str] | None) -> tuple[str, str]:
        ctx = RequestContext(tenant="acme", tags=tags)
        routed, _ = await complete(chat, parse_chat_request(body()), "r", ctx)
        return routed.tier, routed.reason

    assert (await route({"team": "search"}))[0] == "cloud"  # its spend is read on the next refresh
    await book.refresh()
    tier, reason = await route({"team": "search"})
    assert tier == "edge" and "budget spent ($2.0000 of $1 this month): cheapest" in reason
    assert (await route({"team": "ads"}))[0] == "cloud"
    assert (await route(None))[0] == "cloud"
