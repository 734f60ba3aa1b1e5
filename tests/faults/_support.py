"""Helpers of the fault suite: gateways in front of a fake cloud, and servers that can be killed
and brought back on the same port (a fake vLLM in its own process, PostgreSQL)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import Gateway, _postgres_bin, _wait_for_port, free_port, start_gateway

HELLO = [{"role": "user", "content": "Say hello."}]


def cloud_only(url: str, extra: str = "") -> str:
    """Settings for a gateway whose only tier is the fake cloud at ``url``."""
    return (
        f'[edge]\nenabled = false\n[cloud]\nurls = ["{url}"]\nhealth_interval_s = 0.2\n'
        f"eject_after_failures = 1000\n{extra}"
    )


def start_cloud_gateway(tmp: Path, url: str, extra: str = "", tables: str = "") -> Gateway:
    """A gateway in front of the cloud at ``url``, once that cloud is ready. ``tables`` are more TOML
    tables (after the cloud's own)."""
    gw = start_gateway(tmp, cloud_only(url, extra) + tables, edge=False)
    gw.wait(lambda: gw.tier_health("cloud") == "ready", 30, "the fake cloud")
    return gw


def chat(gw: Gateway, timeout: float = 30, **body: object) -> httpx.Response:
    payload = {"model": "cloud", "messages": HELLO, "max_tokens": 4, **body}
    return httpx.post(f"{gw.url}/v1/chat/completions", json=payload, headers=gw.auth, timeout=timeout)


class FakeProcess:
    """A fake vLLM (tests/fakes.py) in a process of its own, so it can be killed with SIGKILL."""

    def __init__(self, mode: str, log: Path) -> None:
        self.mode = mode
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = log
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fakes", str(self.port), self.mode],
            cwd=root,
            stdout=self._log.open("ab"),
            stderr=subprocess.STDOUT,
        )
        _wait_for_port(self.port, self.process, "the fake vLLM")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class Postgres:
    """A PostgreSQL server in a temporary folder that can be stopped and started again on its port."""

    def __init__(self) -> None:
        initdb, self._postgres = _postgres_bin("initdb"), _postgres_bin("postgres")
        if initdb is None or self._postgres is None:
            pytest.skip("PostgreSQL is not installed (scripts/setup.sh installs it)")
        self.root = Path(tempfile.mkdtemp(prefix="tiergate-pg-faults-"))
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self._as_user = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]
        subprocess.run(
            [
                *self._as_user,
                initdb,
                "-D",
                str(self.root / "data"),
                "-U",
                "tiergate",
                "--auth=trust",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )
        self.port = free_port()
        self.url = f"postgresql+psycopg://tiergate@127.0.0.1:{self.port}/postgres"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self._postgres is not None
        options = ["-c", "listen_addresses=127.0.0.1", "-p", str(self.port), "-k", str(self.root)]
        self.process = subprocess.Popen(
            [*self._as_user, self._postgres, "-D", str(self.root / "data"), *options],
            stdout=(self.root / "postgres.log").open("ab"),
            stderr=subprocess.STDOUT,
        )
        _wait_for_port(self.port, self.process, "postgres")
        self.query("SELECT 1", timeout=30)

    def stop(self) -> None:
        """Fast shutdown: clients are disconnected, the data is kept."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(30)

    def query(self, sql: str, timeout: float = 5) -> list[tuple[object, ...]]:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(
                    f"host=127.0.0.1 port={self.port} user=tiergate dbname=postgres", connect_timeout=2
                ) as conn:
                    return list(conn.execute(sql).fetchall())
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def port_is_closed(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return False
    return True
