"""The audit trail through a real gateway (edge with two model versions, a cloud pool of two stand-in
replicas): every kind of change, made the way an operator makes it (the admin API, the admin UI's
sign-in form, the CLI on the gateway's machine, SIGHUP, a price in the settings), makes exactly one row
with the right actor and the right value before and after; no key or key hash enters any row; the
chain verifies; a tenant-admin key reads its tenant's rows only."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from gateway.accounts.audit import Actor
from gateway.accounts.ledger import PriceBook
from gateway.accounts.ledger._pricing import Price
from gateway.accounts.storage import open_database
from gateway.tools.cli import cli
from tests.conftest import Gateway, start_gateway
from tests.fakes import FakeVLLM
from tests.redis_server import RedisServer
from tiers.edge import shipped_model_path

KEYS: list[str] = []  # every key this module made or rotated: none may appear in the trail


@pytest.fixture(scope="module")
def clouds() -> Iterator[tuple[FakeVLLM, FakeVLLM]]:
    with FakeVLLM() as one, FakeVLLM() as two:
        yield one, two


def cloud_config(urls: list[str]) -> str:
    return f"[cloud]\nurls = {json.dumps(urls)}\nhealth_interval_s = 0.5\n"


@pytest.fixture(scope="module")
def gw(
    tmp_path_factory: pytest.TempPathFactory, clouds: tuple[FakeVLLM, FakeVLLM], redis_server: RedisServer
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("audit")
    second = tmp / "smollm2-v2.gguf"
    second.symlink_to(shipped_model_path())
    edge = (
        "[edge]\ninstances = 1\nthreads = 1\n"
        '[[edge.models]]\nname = "smol-v1"\nquality = 0.3\n'
        f'[[edge.models]]\nname = "smol-v2"\npath = "{second}"\nquality = 0.4\nmodalities = ["text"]\n'
        "[edge.models.limits]\nmax_images = 0\n"
    )
    shared = f'[shared]\nredis_url = "{redis_server.url}"\nprefix = "audit:"\n'  # for `tiergate reload`
    gw = start_gateway(tmp, cloud_config([clouds[0].url]) + "[auth]\nkey_cache_s = 0.2\n" + shared + edge)
    KEYS.extend([gw.admin_key])
    yield gw
    gw.stop()


def admin(gw: Gateway, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, f"{gw.url}/admin/api{path}", headers=gw.admin, timeout=60, **kw)


def run_cli(gw: Gateway, *args: str) -> str:
    config = str(gw.log_path.parent / "tiergate.toml")
    result = CliRunner().invoke(cli, [*args, "--config", config])
    assert result.exit_code == 0, result.output
    return str(result.output)


def rows_after(gw: Gateway, seq: int) -> list[dict[str, Any]]:
    got = admin(gw, "GET", "/audit", params={"limit": 50})
    assert got.status_code == 200, got.text
    return [r for r in got.json()["data"] if r["seq"] > seq]


def last_seq(gw: Gateway) -> int:
    data = admin(gw, "GET", "/audit", params={"limit": 1}).json()["data"]
    return int(data[0]["seq"]) if data else 0


def new_tenant(gw: Gateway) -> str:
    name = f"au-{uuid.uuid4().hex[:8]}"
    assert admin(gw, "POST", "/tenants", json={"name": name}).status_code == 201
    return name


def new_key(gw: Gateway, tenant: str, **limits: Any) -> dict[str, Any]:
    made = admin(gw, "POST", "/keys", json={"tenant": tenant, "limits": limits})
    assert made.status_code == 201, made.text
    KEYS.append(made.json()["key"])
    return dict(made.json())


@dataclass
class Expect:
    action: str
    object_type: str
    object_id: str | Callable[[], str]  # a callable: known once the change has run (a new key's id)
    actor_kind: str
    check: Callable[[Any, Any], bool]  # (before, after) as the row has them


# A change: given the gateway, do its set-up and return (the change, what its one row must say).
Change = Callable[[Gateway, tuple[FakeVLLM, FakeVLLM]], tuple[Callable[[], None], Expect]]


def tenant_created(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    name = f"au-{uuid.uuid4().hex[:8]}"

    def post() -> object:
        return admin(gw, "POST", "/tenants", json={"name": name}).raise_for_status()

    return post, Expect("tenant.created", "tenant", name, "key", lambda b, a: b is None and a["name"] == name)


def key_created(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    tenant, made = new_tenant(gw), dict[str, str]()

    def create() -> None:
        made.update(new_key(gw, tenant, tiers=["edge"]))

    def check(b: Any, a: Any) -> bool:
        return b is None and a["limits"]["tiers"] == ["edge"]

    return create, Expect("key.created", "key", lambda: made["id"], "key", check)


def key_limits_changed(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    made = new_key(gw, new_tenant(gw))

    def patch() -> object:
        return admin(gw, "PATCH", f"/keys/{made['id']}", json={"requests_per_min": 9}).raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return b["limits"]["requests_per_min"] == 0 and a["limits"]["requests_per_min"] == 9

    return patch, Expect("key.limits_changed", "key", made["id"], "key", check)


def key_rotated(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    made = new_key(gw, new_tenant(gw))

    def rotate() -> None:
        rotated = admin(gw, "POST", f"/keys/{made['id']}/rotate", json={"overlap_hours": 0.25})
        KEYS.append(rotated.json()["key"])

    def check(b: Any, a: Any) -> bool:
        return b["previous_until"] is None and a["previous_until"] > time.time()

    return rotate, Expect("key.rotated", "key", made["id"], "key", check)


def key_revoked(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    made = new_key(gw, new_tenant(gw))

    def revoke() -> object:
        return admin(gw, "DELETE", f"/keys/{made['id']}").raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return b["revoked_at"] is None and a["revoked_at"] is not None

    return revoke, Expect("key.revoked", "key", made["id"], "key", check)


def policy_set(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    tenant = new_tenant(gw)

    def put() -> object:
        return admin(gw, "PUT", f"/tenants/{tenant}/policy", json={"cache": False}).raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return b is None and a["version"] == 1 and a["policy"]["cache"] is False

    return put, Expect("policy.set", "policy", tenant, "key", check)


def policy_rolled_back(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    tenant = new_tenant(gw)
    for cache in (False, True):
        admin(gw, "PUT", f"/tenants/{tenant}/policy", json={"cache": cache}).raise_for_status()

    def back() -> object:
        return admin(gw, "POST", f"/tenants/{tenant}/policy/rollback", json={"version": 1}).raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return b["policy"]["cache"] is True and a["policy"]["cache"] is False and a["version"] == 3

    return back, Expect("policy.rolled_back", "policy", tenant, "key", check)


def cloud_members_set(gw: Gateway, clouds: tuple[FakeVLLM, FakeVLLM]) -> tuple[Callable[[], None], Expect]:
    urls = [clouds[0].url, clouds[1].url]

    def put() -> object:
        return admin(gw, "PUT", "/cloud/replicas", json={"urls": urls}).raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return len(b["urls"]) == 1 and a["urls"] == urls

    return put, Expect("tier.members_set", "tier", "cloud", "key", check)


def replica_drained(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    name = admin(gw, "GET", "/cloud/replicas").json()[-1]["name"]

    def drain() -> object:
        return admin(gw, "POST", f"/cloud/replicas/{name}/drain").raise_for_status()

    return drain, Expect(
        "tier.drained",
        "replica",
        name,
        "key",
        lambda b, a: not b["draining"] and (a is None or a["draining"]),
    )


def edge_swapped(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    def swap() -> object:
        return admin(gw, "POST", "/edge/models/activate", json={"name": "smol-v2"}).raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return b["active"] == "smol-v1" and a["active"] == "smol-v2"

    return swap, Expect("tier.swapped", "tier", "edge", "key", check)


def edge_rolled_back(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    def back() -> object:
        return admin(gw, "POST", "/edge/models/rollback").raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return b["active"] == "smol-v2" and a["active"] == "smol-v1"

    return back, Expect("tier.rolled_back", "tier", "edge", "key", check)


def settings_reloaded(gw: Gateway, clouds: tuple[FakeVLLM, FakeVLLM]) -> tuple[Callable[[], None], Expect]:
    config = gw.log_path.parent / "tiergate.toml"
    urls = [clouds[1].url]

    def sighup() -> None:
        text = re.sub(r"urls = \[.*?\]", f"urls = {json.dumps(urls)}", config.read_text(), count=1)
        config.write_text(text)
        gw.process.send_signal(signal.SIGHUP)

    def check(b: Any, a: Any) -> bool:
        return a == {"cloud.urls": urls} and b["cloud.urls"] != urls

    return sighup, Expect("settings.reloaded", "settings", "cloud.urls", "system", check)


def cli_reload(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    def reload() -> object:
        return run_cli(gw, "reload")

    def check(b: Any, a: Any) -> bool:
        return b is None and a == {"gateways_listening": 1}

    return reload, Expect("settings.reloaded", "settings", "*", "cli", check)


def model_registered(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    path = str(gw.log_path.parent / "smollm2-v2.gguf")
    spec = {"name": "smol-v3", "path": path, "quality": 0.5, "modalities": ["text"]}

    def register() -> object:
        return admin(gw, "POST", "/edge/models", json=spec).raise_for_status()

    def check(b: Any, a: Any) -> bool:
        return b is None and a["name"] == "smol-v3" and a["quality"] == 0.5

    return register, Expect("tier.model_registered", "edge_model", "smol-v3", "key", check)


def signed_out(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    client = httpx.Client(base_url=gw.url)
    client.get("/admin/login").raise_for_status()
    token = client.cookies["tiergate_signin"]
    client.post("/admin/login", data={"csrf_token": token, "key": gw.admin_key, "next": "/admin/live"})
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/admin/live").text)
    assert csrf is not None

    def sign_out() -> object:
        out = client.post("/admin/logout", data={"csrf_token": csrf.group(1)})
        client.close()
        return out

    admin_id = gw.admin_key.split("_")[1]
    return sign_out, Expect("sign_out", "session", admin_id, "key", lambda b, a: a == {"method": "key"})


def price_set(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    """A price changed in the settings, as the gateway stores it when it starts (PriceBook.sync)."""

    def sync() -> None:
        engine = open_database(f"sqlite:///{gw.data_dir / 'tiergate.db'}")
        PriceBook.sync(engine, [Price(tier="cloud", model="big", prompt_per_1k=0.5)], "cloud")
        engine.dispose()

    def check(b: Any, a: Any) -> bool:
        return b is None and a["prompt_per_1k"] == 0.5

    return sync, Expect("price.set", "price", "cloud/big", "system", check)


def _sign_in(gw: Gateway, key: str) -> httpx.Response:
    with httpx.Client(base_url=gw.url) as client:
        client.get("/admin/login").raise_for_status()
        token = client.cookies["tiergate_signin"]
        return client.post("/admin/login", data={"csrf_token": token, "key": key, "next": "/admin/live"})


def signed_in(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    admin_id = gw.admin_key.split("_")[1]

    def go() -> object:
        return _sign_in(gw, gw.admin_key)

    return go, Expect("sign_in.succeeded", "session", admin_id, "key", lambda b, a: a == {"method": "key"})


def sign_in_failed(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    admin_id = gw.admin_key.split("_")[1]
    wrong = f"tg_{admin_id}_not-its-secret"

    def go() -> object:
        return _sign_in(gw, wrong)

    def check(b: Any, a: Any) -> bool:
        return a["reason"] == "invalid API key" and "not-its-secret" not in json.dumps(a)

    return go, Expect("sign_in.failed", "session", admin_id, "key", check)


def cli_tenant_created(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    name = f"au-{uuid.uuid4().hex[:8]}"

    def go() -> object:
        return run_cli(gw, "tenants", "create", name, "--rpm", "7")

    def check(b: Any, a: Any) -> bool:
        return b is None and a["limits"]["requests_per_min"] == 7

    return go, Expect("tenant.created", "tenant", name, "cli", check)


def cli_key_created(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    tenant, made = new_tenant(gw), dict[str, str]()

    def create() -> None:
        key = (
            run_cli(gw, "keys", "create", "--tenant", tenant, "--budget-month", "50").strip().splitlines()[-1]
        )
        KEYS.append(key)
        made["id"] = key.split("_")[1]

    def check(b: Any, a: Any) -> bool:
        return b is None and a["limits"]["budget_month_usd"] == 50

    return create, Expect("key.created", "key", lambda: made["id"], "cli", check)


def cli_key_updated(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    made = new_key(gw, new_tenant(gw))

    def go() -> object:
        return run_cli(gw, "keys", "update", made["id"], "--tiers", "edge")

    def check(b: Any, a: Any) -> bool:
        return b["limits"]["tiers"] == [] and a["limits"]["tiers"] == ["edge"]

    return go, Expect("key.limits_changed", "key", made["id"], "cli", check)


def cli_key_rotated(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    made = new_key(gw, new_tenant(gw))

    def rotate() -> None:
        KEYS.append(
            run_cli(gw, "keys", "rotate", made["id"], "--overlap-hours", "1").strip().splitlines()[-1]
        )

    def check(b: Any, a: Any) -> bool:
        return b["previous_until"] is None and a["previous_until"] is not None

    return rotate, Expect("key.rotated", "key", made["id"], "cli", check)


def cli_key_revoked(gw: Gateway, _: Any) -> tuple[Callable[[], None], Expect]:
    made = new_key(gw, new_tenant(gw))

    def go() -> object:
        return run_cli(gw, "keys", "revoke", made["id"])

    def check(b: Any, a: Any) -> bool:
        return b["revoked_at"] is None and a["revoked_at"] is not None

    return go, Expect("key.revoked", "key", made["id"], "cli", check)


CHANGES: list[Change] = [
    tenant_created,
    key_created,
    key_limits_changed,
    key_rotated,
    key_revoked,
    policy_set,
    policy_rolled_back,
    cloud_members_set,
    replica_drained,
    edge_swapped,
    edge_rolled_back,
    settings_reloaded,
    cli_reload,
    model_registered,
    price_set,
    signed_in,
    sign_in_failed,
    signed_out,
    cli_tenant_created,
    cli_key_created,
    cli_key_updated,
    cli_key_rotated,
    cli_key_revoked,
]


@pytest.mark.parametrize("change", CHANGES, ids=[c.__name__ for c in CHANGES])
def test_each_change_makes_exactly_one_row_with_its_before_and_after(
    gw: Gateway, clouds: tuple[FakeVLLM, FakeVLLM], change: Change
) -> None:
    make, expect = change(gw, clouds)
    before = last_seq(gw)
    make()
    deadline = time.monotonic() + 10  # SIGHUP's row is written by the gateway on its own time
    while not (rows := rows_after(gw, before)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)  # and nothing more follows
    rows = rows_after(gw, before)
    assert len(rows) == 1, rows
    row = rows[0]
    object_id = expect.object_id() if callable(expect.object_id) else expect.object_id
    assert (row["action"], row["object_type"], row["object_id"]) == (
        expect.action,
        expect.object_type,
        object_id,
    )
    assert row["actor_kind"] == expect.actor_kind
    if expect.actor_kind == "cli":
        assert row["actor"] == Actor.of_cli().id
    if expect.actor_kind == "key":
        assert row["address"] == "127.0.0.1"
    assert expect.check(row["before"], row["after"]), row


def test_no_key_or_key_hash_in_any_row_and_the_chain_verifies(gw: Gateway) -> None:
    assert len(KEYS) > 10
    exported = run_cli(gw, "audit", "export", "--format", "jsonl") + run_cli(
        gw, "audit", "export", "--format", "csv"
    )
    assert exported.count("\n") > 40
    for key in KEYS:
        secret = key.split("_", 2)[2]
        assert secret not in exported and hashlib.sha256(key.encode()).hexdigest() not in exported
    assert run_cli(gw, "audit", "verify").startswith("audit trail holds")


def test_a_tenant_admin_key_reads_its_tenants_rows_only_and_an_inference_key_none(gw: Gateway) -> None:
    tenant, other = new_tenant(gw), new_tenant(gw)
    made = admin(gw, "POST", f"/tenants/{tenant}/keys", json={"role": "tenant-admin"}).json()
    KEYS.append(made["key"])
    plain = new_key(gw, tenant)["key"]
    seen = httpx.get(f"{gw.url}/admin/api/audit", headers={"Authorization": f"Bearer {made['key']}"}).json()
    assert {r["tenant"] for r in seen["data"]} == {tenant} and len(seen["data"]) == 3  # created, 2 keys
    asked = httpx.get(
        f"{gw.url}/admin/api/audit",
        params={"tenant": other},
        headers={"Authorization": f"Bearer {made['key']}"},
    )
    assert asked.json()["data"] == []
    refused = httpx.get(f"{gw.url}/admin/api/audit", headers={"Authorization": f"Bearer {plain}"})
    assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
    bad = admin(gw, "GET", "/audit", params={"since": "last week"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"
