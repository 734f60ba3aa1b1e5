"""The policy admin API on a real gateway (fake cloud): read, replace, 400 naming the field,
history, rollback, 403/404 for tenants, and the next request obeys the change."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import Gateway
from tests.fakes import FakeVLLM
from tests.integration.test_tenants_api import admin, error_of, start


def put_if_match(gw: Gateway, version: int, body: dict[str, object]) -> httpx.Response:
    headers = {"Authorization": f"Bearer {gw.admin_key}", "If-Match": str(version)}
    return httpx.put(f"{gw.url}/admin/api/tenants/default/policy", json=body, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeVLLM]:
    with FakeVLLM(delay_s=0.01) as server:
        yield server


@pytest.fixture(scope="module")
def gw(fake: FakeVLLM, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gateway = start(tmp_path_factory.mktemp("policies"), fake, "[cache]\nenabled = true\n")
    yield gateway
    gateway.stop()


def test_read_replace_history_rollback(gw: Gateway) -> None:
    got = admin(gw, "GET", "/tenants/default/policy")
    assert got.status_code == 200, got.text
    assert got.json()["source"] == "configured" and got.json()["policy"]["strategy"] == "learned"

    body = {"strategy": "always-cloud", "latency": {"total_ms": 5000, "percentile": 99}, "cache": False}
    put = admin(gw, "PUT", "/tenants/default/policy", json=body)
    assert put.status_code == 200, put.text
    assert put.json()["version"] == 1 and put.json()["policy"]["latency"]["percentile"] == 99
    assert put.json()["updated_by"].startswith("admin:")

    assert put_if_match(gw, 0, {}).status_code == 409
    assert put_if_match(gw, 1, {"strategy": "always-edge"}).status_code == 200
    history = admin(gw, "GET", "/tenants/default/policy/history").json()["data"]
    assert [h["version"] for h in history] == [2, 1]
    assert (
        history[0]["before"]["strategy"] == "always-cloud"
        and history[0]["after"]["strategy"] == "always-edge"
    )

    back = admin(gw, "POST", "/tenants/default/policy/rollback", json={"version": 1})
    assert back.status_code == 200 and back.json()["version"] == 3
    assert back.json()["policy"]["strategy"] == "always-cloud"
    assert admin(gw, "POST", "/tenants/default/policy/rollback", json={"version": 42}).status_code == 404


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"latency": {"total_ms": "soon"}}, "latency.total_ms"),
        ({"budget": {"period": "decade"}}, "budget.period"),
        ({"strategy": "dartboard"}, "strategy"),
        ({"modality_rules": {"video": "mars"}}, "modality_rules.video"),
        ({"quality_floor": 2}, "quality_floor"),
    ],
)
def test_a_bad_policy_is_400_naming_the_field(gw: Gateway, body: dict[str, object], param: str) -> None:
    resp = admin(gw, "PUT", "/tenants/default/policy", json=body)
    assert resp.status_code == 400
    assert error_of(resp)["param"] == param


def test_tenants_read_their_own_and_change_nothing(gw: Gateway) -> None:
    assert admin(gw, "POST", "/tenants", json={"name": "other"}).status_code == 201
    assert admin(gw, "GET", "/tenants/nobody/policy").status_code == 404
    mine = admin(gw, "GET", "/tenants/default/policy", key=gw.api_key)
    assert mine.status_code == 200
    assert admin(gw, "GET", "/tenants/other/policy", key=gw.api_key).status_code == 404
    assert admin(gw, "PUT", "/tenants/default/policy", key=gw.api_key, json={}).status_code == 403
    assert admin(gw, "PUT", "/policies/default", key=gw.api_key, json={}).status_code == 403
    assert httpx.get(f"{gw.url}/admin/api/tenants/default/policy").status_code == 401


def test_a_tenant_admin_key_changes_its_own_tenants_policy_only(gw: Gateway) -> None:
    """The one rule of gateway.accounts.tenants (shared with people signed in through single sign-on)."""
    for name in ("ta-mine", "ta-other"):
        assert admin(gw, "POST", "/tenants", json={"name": name}).status_code == 201
    made = admin(gw, "POST", "/tenants/ta-mine/keys", json={"role": "tenant-admin"})
    boss = made.json()["key"]
    body = {"strategy": "always-edge"}
    changed = admin(gw, "PUT", "/tenants/ta-mine/policy", key=boss, json=body)
    assert changed.status_code == 200, changed.text
    assert changed.json()["policy"]["strategy"] == "always-edge"
    assert changed.json()["updated_by"].startswith("tenant-admin:")
    assert admin(gw, "PUT", "/tenants/ta-other/policy", key=boss, json=body).status_code == 404
    assert admin(gw, "PUT", "/policies/default", key=boss, json=body).status_code == 403
    assert admin(gw, "GET", "/cloud/replicas", key=boss).status_code == 403


def test_the_next_request_obeys_a_change(gw: Gateway) -> None:
    """cache on/off is read per request: turning it off makes the next repeat a miss (bypass)."""
    payload = {
        "model": "cloud",
        "messages": [{"role": "user", "content": "policy?"}],
        "max_tokens": 4,
        "temperature": 0,
    }
    headers = gw.auth

    def cache_status() -> str:
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json=payload, headers=headers, timeout=30)
        assert resp.status_code == 200, resp.text
        return resp.headers["x-tiergate-cache"]

    assert admin(gw, "PUT", "/tenants/default/policy", json={"cache": True}).status_code == 200
    cache_status()
    assert cache_status() == "hit"
    assert admin(gw, "PUT", "/tenants/default/policy", json={"cache": False}).status_code == 200
    assert cache_status() == "bypass"


def test_the_default_policy_can_be_edited(gw: Gateway) -> None:
    put = admin(gw, "PUT", "/policies/default", json={"quality_floor": 0.25})
    assert put.status_code == 200 and put.json()["version"] == 1
    other = admin(gw, "GET", "/tenants/other/policy").json()
    assert other["source"] == "default" and other["policy"]["quality_floor"] == 0.25
    assert [h["version"] for h in admin(gw, "GET", "/policies/default/history").json()["data"]] == [1]
