"""Key roles through a real gateway: a leaked inference key cannot mint or revoke keys, a
tenant-admin key manages its own tenant's keys only, open mode mints nothing, and `tiergate serve`
refuses open mode on a non-loopback address unless told it is meant."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import TIERGATE, Gateway, free_port, start_gateway
from tests.faults._support import chat


def admin_api(gw: Gateway, method: str, path: str, key: str, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.request(method, f"{gw.url}/admin/api{path}", headers=headers, timeout=30, **kw)


def error_of(resp: httpx.Response, status: int) -> dict[str, Any]:
    assert resp.status_code == status, resp.text[:500]
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


def chat_as(gw: Gateway, key: str) -> httpx.Response:
    body = {"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    headers = {"Authorization": f"Bearer {key}"}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers=headers, timeout=30)


def new_tenant(gw: Gateway) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    assert admin_api(gw, "POST", "/tenants", gw.admin_key, json={"name": name}).status_code == 201
    return name


def test_an_inference_key_cannot_mint_list_or_revoke_keys(target: Gateway) -> None:
    mine = target.api_key  # the `default` tenant's inference key
    made = admin_api(target, "POST", "/tenants/default/keys", mine, json={"name": "successor"})
    assert "tenant-admin" in error_of(made, 403)["message"]
    error_of(admin_api(target, "GET", "/tenants/default/keys", mine), 403)
    own_id = mine.split("_")[1]
    error_of(admin_api(target, "DELETE", f"/keys/{own_id}", mine), 403)
    assert chat(target).status_code == 200  # nothing changed
    listed = admin_api(target, "GET", "/tenants/default/keys", target.admin_key).json()["data"]
    assert all(k["name"] != "successor" for k in listed)


def test_a_tenant_admin_key_manages_its_own_tenants_keys_only(target: Gateway) -> None:
    tenant, other = new_tenant(target), new_tenant(target)
    made = admin_api(
        target, "POST", f"/tenants/{tenant}/keys", target.admin_key, json={"role": "tenant-admin"}
    )
    assert made.status_code == 201 and made.json()["role"] == "tenant-admin"
    boss = made.json()["key"]

    worker = admin_api(target, "POST", f"/tenants/{tenant}/keys", boss, json={"name": "worker"})
    assert worker.status_code == 201 and worker.json()["role"] == "tenant"
    assert chat_as(target, worker.json()["key"]).status_code == 200
    ids = {k["id"] for k in admin_api(target, "GET", f"/tenants/{tenant}/keys", boss).json()["data"]}
    assert worker.json()["id"] in ids
    # A worker key (inference) cannot mint its own successor.
    error_of(admin_api(target, "POST", f"/tenants/{tenant}/keys", worker.json()["key"]), 403)
    # Only an admin makes tenant-admin keys; nothing of another tenant is visible.
    promoted = admin_api(target, "POST", f"/tenants/{tenant}/keys", boss, json={"role": "tenant-admin"})
    assert "admin key" in error_of(promoted, 403)["message"]
    error_of(admin_api(target, "POST", f"/tenants/{other}/keys", boss), 404)
    error_of(admin_api(target, "GET", f"/tenants/{other}/keys", boss), 404)
    other_key = admin_api(target, "POST", f"/tenants/{other}/keys", target.admin_key).json()
    error_of(admin_api(target, "DELETE", f"/keys/{other_key['id']}", boss), 404)
    error_of(admin_api(target, "DELETE", f"/keys/{target.admin_key.split('_')[1]}", boss), 404)
    error_of(admin_api(target, "POST", "/tenants", boss, json={"name": "nope"}), 403)

    revoked = admin_api(target, "DELETE", f"/keys/{worker.json()['id']}", boss)
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert chat_as(target, worker.json()["key"]).status_code == 401
    assert chat_as(target, other_key["key"]).status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {"role": "admin"},
        {"role": "root"},
        {"name": "x" * 129},
        {"name": "a\u0000b"},
        {"name": "line\nbreak"},
    ],
)
def test_bad_roles_and_labels_are_400_never_500(target: Gateway, body: dict[str, str]) -> None:
    error_of(admin_api(target, "POST", "/tenants/default/keys", target.admin_key, json=body), 400)


def test_open_mode_mints_no_keys(tmp_path: Path, target: Gateway) -> None:
    cloud = target.log_path.parent / "tiergate.toml"
    config = cloud.read_text().split("\n", 1)[1]  # the target's settings but its data_dir
    gw = start_gateway(tmp_path, config + "\n[auth]\nopen_mode = true\n", edge=False)
    try:
        for method, path in (("POST", "/tenants/default/keys"), ("GET", "/tenants/default/keys")):
            resp = httpx.request(method, f"{gw.url}/admin/api{path}", json={}, timeout=30)
            assert "open mode" in error_of(resp, 403)["message"]
        anything = {"Authorization": "Bearer whatever"}
        resp = httpx.post(f"{gw.url}/admin/api/tenants", json={"name": "x"}, headers=anything, timeout=30)
        error_of(resp, 403)
    finally:
        gw.stop()


ALLOW = ["--allow-open-mode-on-network"]
OPEN_MODE = {**os.environ, "TIERGATE_AUTH__OPEN_MODE": "true"}


def _no_tiers(tmp_path: Path) -> Path:
    config = tmp_path / "tiergate.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n[edge]\nenabled = false\n[cloud]\nenabled = false\n'
    )
    return config


def test_serve_refuses_open_mode_on_a_network_address(tmp_path: Path) -> None:
    command = [TIERGATE, "serve", "--config", str(_no_tiers(tmp_path)), "--host", "0.0.0.0"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=OPEN_MODE)
    assert done.returncode == 2, done.stderr
    assert "auth.allow_open_mode_on_network" in done.stderr and "0.0.0.0" in done.stderr
    assert not (tmp_path / "data" / "tiergate.db").exists()  # refused before anything started


def test_serve_takes_open_mode_on_a_network_address_when_told(tmp_path: Path) -> None:
    config, port, log = _no_tiers(tmp_path), free_port(), tmp_path / "gateway.log"
    process = subprocess.Popen(
        [TIERGATE, "serve", "--config", str(config), "--host", "0.0.0.0", "--port", str(port), *ALLOW],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        env=OPEN_MODE,
    )
    try:
        gw = Gateway(process, f"http://127.0.0.1:{port}", log, tmp_path / "data")
        gw.wait(lambda: httpx.get(f"{gw.url}/healthz").status_code == 200, 60, "the gateway")
    finally:
        process.terminate()
        process.wait(30)
