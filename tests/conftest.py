"""Fixtures that start real gateways (``tiergate serve`` in a child process) on loopback ports."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import msgspec
import openai
import pytest

from tests.redis_server import RedisServer, start_redis

TIERGATE = str(Path(sys.executable).with_name("tiergate"))
CLOUD_START_TIMEOUT_S = float(os.environ.get("TG_TEST_CLOUD_TIMEOUT", "900"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.update(int(p) for p in (task / "children").read_text().split())
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


@dataclass
class Gateway:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    data_dir: Path
    # The first run's keys (from <data_dir>/initial-credentials.json): the `default` tenant's and the admin's.
    api_key: str = ""
    admin_key: str = ""

    def client(self, api_key: str | None = None, **kwargs: Any) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=f"{self.url}/v1", api_key=api_key or self.api_key, max_retries=0, **kwargs
        )

    def anthropic(self, api_key: str | None = None, **kwargs: Any) -> Any:
        """Anthropic's own client on this gateway's Messages API (it sends the key as x-api-key)."""
        import anthropic

        return anthropic.Anthropic(
            base_url=self.url, api_key=api_key or self.api_key, max_retries=0, **kwargs
        )

    @property
    def auth(self) -> dict[str, str]:
        """Headers that authenticate as the `default` tenant."""
        return {"Authorization": f"Bearer {self.api_key}"}

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def load_credentials(self) -> None:
        path = self.data_dir / "initial-credentials.json"
        if path.exists():
            creds = json.loads(path.read_text())
            self.api_key, self.admin_key = creds["tenant_key"], creds["admin_key"]

    def readyz(self) -> dict[str, Any]:
        return dict(httpx.get(f"{self.url}/readyz", timeout=5).json())

    def tier_health(self, name: str) -> str:
        return next(t["health"] for t in self.readyz()["tiers"] if t["name"] == name)

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"gateway exited ({self.process.returncode}):\n{self.log()}")
            with contextlib.suppress(httpx.HTTPError):
                if predicate():
                    return
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}:\n{self.log()[-4000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 60) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


def start_gateway(
    tmp: Path, config: str = "", env: dict[str, str] | None = None, edge: bool = True, port: int | None = None
) -> Gateway:
    port = port or free_port()
    config_path = tmp / "tiergate.toml"
    config_path.write_text(f'data_dir = "{tmp / "data"}"\n{config}')
    log_path = tmp / "gateway.log"
    process = subprocess.Popen(
        [TIERGATE, "serve", "--config", str(config_path), "--port", str(port)],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    gateway = Gateway(process, f"http://127.0.0.1:{port}", log_path, tmp / "data")
    if edge:
        gateway.wait(lambda: gateway.tier_health("edge") == "ready", 120, "the edge tier")
    else:
        gateway.wait(lambda: httpx.get(f"{gateway.url}/healthz").status_code == 200, 60, "the gateway")
    gateway.load_credentials()
    return gateway


NEEDS_CLOUD = pytest.StashKey[bool]()
SECOND_VLLM = pytest.StashKey["VLLMServer"]()


def local_vllm_installed() -> bool:
    """Whether scripts/setup.sh installed the local vLLM server that the `cloud` tier starts."""
    from gateway.settings import load_settings

    return Path(load_settings().local_vllm().python).exists()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private redis-server on a loopback port, for the shared cache backend."""
    server = start_redis(tmp_path_factory.mktemp("redis"), free_port())
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gateway(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The embedded default: edge in-process, cloud = a local vLLM the gateway starts itself.

    When no selected test needs the cloud, the local vLLM server is not started (it costs a
    minute or two of both cores); the cloud tier then reports itself down.
    """
    config = "" if request.config.stash.get(NEEDS_CLOUD, True) else "[cloud.local]\nenabled = false\n"
    gw = start_gateway(tmp_path_factory.mktemp("gateway"), config)
    yield gw
    gw.stop()


@pytest.fixture(scope="session")
def cloud_gateway(gateway: Gateway) -> Gateway:
    """The same gateway once its local vLLM server answers (start-up takes a minute or two)."""
    gateway.wait(lambda: gateway.tier_health("cloud") == "ready", CLOUD_START_TIMEOUT_S, "the cloud tier")
    return gateway


# The tiers a test of the API runs on, with :func:`tier_gw`: the edge, the router's choice and the cloud
# (marked ``cloud``: it needs the local vLLM server); requests past the result cache send FRESH.
EDGE, AUTO = "edge", "tiergate-auto"
CLOUD = pytest.param("cloud", marks=pytest.mark.cloud, id="cloud")
EVERY_TIER = pytest.mark.parametrize("model", [EDGE, AUTO, CLOUD])
FRESH = {"Cache-Control": "no-cache"}


@pytest.fixture
def tier_gw(request: pytest.FixtureRequest, model: str) -> Gateway:
    """The suite's gateway for the tier a test is parametrized with (``model``): for ``cloud``, once its
    local vLLM server answers (skipped where it is not installed)."""
    if model != "cloud":
        return request.getfixturevalue("gateway")  # type: ignore[no-any-return]
    if not local_vllm_installed():
        pytest.skip("the local vLLM server is not installed (scripts/setup.sh installs it)")
    return request.getfixturevalue("cloud_gateway")  # type: ignore[no-any-return]


@pytest.fixture
def tier_client(tier_gw: Gateway) -> openai.OpenAI:
    """The official client on :func:`tier_gw`, past the result cache."""
    return tier_gw.client(default_headers=FRESH, timeout=120)


@pytest.fixture
def edge_only(tmp_path: Path) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path, "[cloud]\nenabled = false\n")
    yield gw
    gw.stop()


# After every other cloud test, in this order: one takes the shared gateway's cloud tier away for a
# minute or two (it kills the vLLM server and waits for its restart), the last stops the gateway.
LAST_TESTS = (
    "test_a_killed_vllm_server_is_restarted_with_nothing_of_it_left",
    "test_stopping_the_gateway_stops_its_vllm_server",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run tests that need the local vLLM server last, so it boots while the others run, and
    the ones that kill its server or stop the shared gateway after all of them."""
    stops_gateway = [i for i in items if i.name in LAST_TESTS]
    stops_gateway.sort(key=lambda i: LAST_TESTS.index(i.name))
    cloud = [i for i in items if i.get_closest_marker("cloud") and i not in stops_gateway]
    rest = [i for i in items if i not in cloud and i not in stops_gateway]
    items[:] = rest + cloud + stops_gateway
    config.stash[NEEDS_CLOUD] = bool(cloud or stops_gateway)
    if any("second_vllm" in getattr(i, "fixturenames", ()) for i in items) and local_vllm_installed():
        # Its boot (a minute or more) then overlaps the tests that run first instead of adding to them.
        config.stash[SECOND_VLLM] = VLLMServer.started(Path(tempfile.mkdtemp(prefix="tiergate-vllm-")))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the second vLLM replica even when no test got as far as asking for it (``-x``, Ctrl-C)."""
    if SECOND_VLLM in config.stash:
        config.stash[SECOND_VLLM].kill()


@dataclass
class VLLMServer:
    """A real vLLM server on a loopback port, started the way the gateway starts its local one."""

    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def started(cls, folder: Path) -> VLLMServer:
        server = cls(free_port(), folder / "vllm.log")
        server.start()
        return server

    def start(self) -> None:
        from gateway.settings import load_settings
        from tiers.cloud._local import LocalVLLMServer

        local = msgspec.structs.replace(load_settings().local_vllm(), port=self.port, kv_cache_gib=1)
        command = LocalVLLMServer(local, None).command()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
        self.process = subprocess.Popen(
            command,
            stdout=self.log_path.open("ab"),
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )

    def wait_healthy(self, timeout: float = CLOUD_START_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"vLLM exited:\n{self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.5)
        raise AssertionError(f"vLLM on {self.port} not healthy after {timeout}s")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)


@pytest.fixture(scope="session")
def second_vllm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> VLLMServer:
    """A second real vLLM replica (the session gateway's local server is the first), started as soon
    as the tests are collected (:func:`pytest_collection_modifyitems`); stopped at the session's end."""
    if SECOND_VLLM not in request.config.stash:  # not installed: fails here, in the tests that need it
        request.config.stash[SECOND_VLLM] = VLLMServer.started(tmp_path_factory.mktemp("vllm"))
    return request.config.stash[SECOND_VLLM]


# -- real Redis and PostgreSQL servers on loopback ports, in temporary folders ------------------


def _wait_for_port(port: int, process: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{what} exited with {process.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} did not listen on {port} within {timeout}s")


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A real redis-server of this test's own."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed (scripts/setup.sh installs it)")
    port = free_port()
    process = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, process, "redis-server")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


def _postgres_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(candidates[-1]) if candidates else None


_PG_OPTIONS = ["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A real PostgreSQL server in a temporary folder (as the `postgres` user when run as root,
    since PostgreSQL refuses to run as root)."""
    initdb, postgres = _postgres_bin("initdb"), _postgres_bin("postgres")
    if initdb is None or postgres is None:
        pytest.skip("PostgreSQL is not installed (scripts/setup.sh installs it)")
    root = Path(tempfile.mkdtemp(prefix="tiergate-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        import pwd

        user = pwd.getpwnam("postgres")
        os.chown(root, user.pw_uid, user.pw_gid)
        # setpriv execs (no forking wrapper), so terminate() reaches postgres itself
        as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]
    data = root / "data"
    subprocess.run(
        [*as_user, initdb, "-D", str(data), "-U", "tiergate", "--auth=trust", "--no-sync"],
        check=True,
        capture_output=True,
    )
    port = free_port()
    process = subprocess.Popen(
        [*as_user, postgres, "-D", str(data), "-p", str(port), "-k", str(root), *_PG_OPTIONS],
        stdout=(root / "postgres.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_for_port(port, process, "postgres")
        url = f"postgresql+psycopg://tiergate@127.0.0.1:{port}/postgres"
        deadline = time.monotonic() + 30
        while True:  # listening is not yet accepting: wait for a real connection
            import psycopg

            try:
                psycopg.connect(f"host=127.0.0.1 port={port} user=tiergate dbname=postgres").close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(30)
        shutil.rmtree(root, ignore_errors=True)
