"""Exposure, against real `tiergate serve` processes: unknown keys and failed admin sign-ins are
throttled per client address (429 with Retry-After), only trusted proxies may name the client, the
admin cookie is Secure whenever the gateway listens beyond loopback, and the gateway serves HTTPS
with a certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import TIERGATE, Gateway, free_port, start_gateway

NO_TIERS = "[edge]\nenabled = false\n[cloud]\nenabled = false\n"
WRONG = {"Authorization": "Bearer tg_000000000000_not-a-real-secret"}


@pytest.fixture(scope="module")
def throttled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = (
        NO_TIERS
        + '[auth]\nfailed_auth_limit = 5\nfailed_auth_window_s = 3\n[server]\ntrusted_proxies = ["127.0.0.2"]\n'
    )
    gw = start_gateway(tmp_path_factory.mktemp("throttled"), config, edge=False)
    yield gw
    gw.stop()


def models(gw: Gateway, headers: dict[str, str], **kw: object) -> httpx.Response:
    return httpx.get(f"{gw.url}/v1/models", headers=headers, timeout=10, **kw)  # type: ignore[arg-type]


def test_unknown_keys_are_throttled_per_address_with_retry_after(throttled: Gateway) -> None:
    statuses = [models(throttled, WRONG).status_code for _ in range(5)]
    assert statuses == [401] * 5
    refused = models(throttled, WRONG)
    assert refused.status_code == 429 and 1 <= int(refused.headers["Retry-After"]) <= 3
    assert refused.json()["error"]["code"] == "rate_limit_exceeded"
    assert models(throttled, throttled.auth).status_code == 429  # this address, whatever key
    # Another address (127.0.0.2 is a trusted proxy here, naming its own client) is not refused.
    via_proxy = httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    with via_proxy:
        other = via_proxy.get(
            f"{throttled.url}/v1/models", headers={**throttled.auth, "X-Forwarded-For": "198.51.100.9"}
        )
        assert other.status_code == 200
    throttled.wait(lambda: models(throttled, throttled.auth).status_code == 200, 10, "the window to pass")


def test_an_untrusted_peer_cannot_name_another_address(throttled: Gateway) -> None:
    throttled.wait(lambda: models(throttled, throttled.auth).status_code == 200, 10, "a fresh window")
    for i in range(6):  # each claims another address; all count against 127.0.0.1
        models(throttled, {**WRONG, "X-Forwarded-For": f"203.0.113.{i}"})
    assert models(throttled, throttled.auth).status_code == 429
    throttled.wait(lambda: models(throttled, throttled.auth).status_code == 200, 10, "the window to pass")


def sign_in(gw: Gateway, key: str) -> httpx.Response:
    with httpx.Client(base_url=gw.url, timeout=10) as client:
        form = client.get("/admin/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None, form.text[:500]
        return client.post("/admin/login", data={"key": key, "csrf_token": token[1]})


def test_failed_sign_ins_are_throttled(throttled: Gateway) -> None:
    throttled.wait(lambda: models(throttled, throttled.auth).status_code == 200, 10, "a fresh window")
    assert [sign_in(throttled, "tg_000000000000_guess").status_code for _ in range(5)] == [401] * 5
    refused = sign_in(throttled, throttled.admin_key)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "too many failed" in refused.text
    throttled.wait(lambda: sign_in(throttled, throttled.admin_key).status_code == 303, 10, "the window")


def test_the_admin_cookie_is_secure_when_not_on_loopback(throttled: Gateway, tmp_path: Path) -> None:
    local = sign_in(throttled, throttled.admin_key)
    assert local.status_code == 303 and "secure" not in local.headers["set-cookie"].lower()
    config = tmp_path / "tiergate.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n{NO_TIERS}')
    port = free_port()
    log = tmp_path / "gateway.log"
    process = subprocess.Popen(
        [TIERGATE, "serve", "--config", str(config), "--host", "0.0.0.0", "--port", str(port)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    gw = Gateway(process, f"http://127.0.0.1:{port}", log, tmp_path / "data")
    try:
        gw.wait(lambda: httpx.get(f"{gw.url}/healthz").status_code == 200, 60, "the gateway")
        form = httpx.get(f"{gw.url}/admin/login", timeout=10)  # its CSRF cookie: Secure, so a
        cookies = form.headers.get_list("set-cookie")  # browser sends it back over HTTPS only
        assert cookies and all("secure" in c.lower() for c in cookies)
    finally:
        gw.stop()


def self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    return cert_path, key_path


def test_the_gateway_serves_https_with_its_certificate(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    cert, key = self_signed(tmp_path)
    config = tmp_path / "tiergate.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\n{NO_TIERS}[server]\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
    )
    port = free_port()
    log = tmp_path / "gateway.log"
    process = subprocess.Popen(
        [TIERGATE, "serve", "--config", str(config), "--port", str(port)],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    gw = Gateway(process, f"https://127.0.0.1:{port}", log, tmp_path / "data")
    try:
        gw.wait(
            lambda: (
                httpx.get(f"{gw.url}/healthz", verify=ssl.create_default_context(cafile=cert)).status_code
                == 200
            ),
            60,
            "HTTPS",
        )
        gw.load_credentials()
        assert (
            httpx.get(
                f"{gw.url}/v1/models", headers=gw.auth, verify=ssl.create_default_context(cafile=cert)
            ).status_code
            == 200
        )
        cookie = sign_in_tls(gw, cert)
        assert "secure" in cookie.lower()
        with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port is not served
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).raise_for_status()
    finally:
        gw.stop()


def sign_in_tls(gw: Gateway, cert: Path) -> str:
    with httpx.Client(base_url=gw.url, timeout=10, verify=ssl.create_default_context(cafile=cert)) as client:
        form = client.get("/admin/login")
        token = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert token is not None
        done = client.post("/admin/login", data={"key": gw.admin_key, "csrf_token": token[1]})
        assert done.status_code == 303
        return str(done.headers["set-cookie"])


def test_a_certificate_without_its_key_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "tiergate.toml"
    config.write_text(f'data_dir = "{tmp_path / "data"}"\n{NO_TIERS}[server]\ntls_cert = "/nope.pem"\n')
    done = subprocess.run(
        [TIERGATE, "serve", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "tls_key" in done.stderr


def test_replica_urls_and_metrics_are_for_operators_only(throttled: Gateway) -> None:
    """/readyz's details and /metrics: for loopback clients and admin keys. A client a trusted proxy
    (127.0.0.2 here) names as 198.51.100.7 sees only whether the gateway is ready."""
    assert "tiers" in httpx.get(f"{throttled.url}/readyz", timeout=10).json()  # loopback: an operator
    forwarded = {"X-Forwarded-For": "198.51.100.7"}
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2"), timeout=10) as remote:
        ready = remote.get(f"{throttled.url}/readyz", headers=forwarded)
        assert set(ready.json()) == {"ready"}
        refused = remote.get(f"{throttled.url}/metrics", headers=forwarded)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
        as_tenant = remote.get(f"{throttled.url}/metrics", headers={**forwarded, **throttled.auth})
        assert as_tenant.status_code == 403
        admin = {**forwarded, "Authorization": f"Bearer {throttled.admin_key}"}
        assert remote.get(f"{throttled.url}/metrics", headers=admin).status_code == 200
        assert "tiers" in remote.get(f"{throttled.url}/readyz", headers=admin).json()
        as_anthropic = {
            **forwarded,
            "x-api-key": throttled.admin_key,
        }  # the key as Anthropic's clients send it
        assert remote.get(f"{throttled.url}/metrics", headers=as_anthropic).status_code == 200
