"""The doctor's checks of this machine and what the install talks to, rather than of the install
itself: the gateway's port, Redis and PostgreSQL when configured, and GPU visibility."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from pathlib import Path

import httpx

from gateway.settings import Settings
from gateway.tools import accel
from gateway.tools.appliance.doctor_report import Finding, Status


def check_port(port: int) -> list[Finding]:
    """The port is free, or answered by tiergate (and which tiers are ready), or taken."""
    with socket.socket() as sock:
        sock.settimeout(1.0)
        if sock.connect_ex(("127.0.0.1", port)) != 0:
            return [Finding("port", "ok", f"port {port} is free (tiergate is not running)")]
    try:
        resp = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=3)
        tiers = resp.json().get("tiers")
    except (httpx.HTTPError, ValueError, AttributeError):
        tiers = None
    if tiers is None:
        return [
            Finding(
                "port",
                "fail",
                f"port {port} is taken by another program",
                f"stop it (ss -ltnp 'sport = :{port}') or change server.port",
            )
        ]
    states = ", ".join(f"{t['name']} {t['health']}" for t in tiers)
    status: Status = "ok" if resp.status_code == 200 else "warn"
    return [
        Finding(
            "port",
            status,
            f"tiergate answers on port {port}: {states}",
            "" if status == "ok" else "journalctl -u tiergate says why no tier is ready",
        )
    ]


def check_shared(s: Settings) -> list[Finding]:
    """Redis and PostgreSQL answer when configured; shared state set with some state still local."""
    out = []
    redis_urls = {u for u in (s.shared.redis_url, s.limits.redis_url) if u}
    if s.cache.enabled and s.cache.backend == "redis":
        redis_urls.add(s.cache.redis_url)
    for url in sorted(redis_urls):
        out.append(_reach("redis", url))
    if s.storage.database_url.startswith("postgresql"):
        out.append(_reach("postgresql", s.storage.database_url))
    if s.shared.redis_url:
        alone = [
            name
            for name, local in (
                ("cache.backend", s.cache.enabled and s.cache.backend != "redis"),
                ("limits.redis_url", not s.limits.redis_url),
                ("storage.database_url", not s.storage.database_url.startswith("postgresql")),
            )
            if local
        ]
        if alone:
            out.append(
                Finding(
                    "shared",
                    "warn",
                    f"shared.redis_url is set but {', '.join(alone)} keep state in this instance only",
                    "README 'Scaling out' shows the settings for several gateways",
                )
            )
    return out


def check_gpu(variant: str = "cpu", built_cuda: str = "") -> list[Finding]:
    """The GPUs nvidia-smi lists; none is fine for a CPU bundle (the edge model runs on the CPU), a
    broken driver warns; and whether the bundle's llama.cpp build (``variant``: cpu, cuda-90, made with
    CUDA ``built_cuda``) fits the driver, its CUDA version and the GPUs' compute capability."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        devices = sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))
        detail = f"devices {', '.join(devices)} but no nvidia-smi" if devices else "no GPU visible"
        seen = Finding("gpu", "ok", f"{detail}: the edge model runs on the CPU; vLLM runs on its own servers")
        return [seen, *_fits(variant, built_cuda, accel.Box())]
    done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    if done.returncode != 0:
        return [
            Finding(
                "gpu",
                "warn",
                f"nvidia-smi failed: {(done.stderr or done.stdout).strip()[:200]}",
                "check the NVIDIA driver (nvidia-smi); the edge model still runs on the CPU",
            )
        ]
    gpus = [line for line in done.stdout.splitlines() if line.startswith("GPU")]
    listed = Finding("gpu", "ok", f"{len(gpus)} GPU(s): {'; '.join(gpus)[:300]}")
    return [listed, *_fits(variant, built_cuda, accel.probe())]


def _fits(variant: str, built_cuda: str, box: accel.Box) -> list[Finding]:
    """The build against the box (gateway/tools/accel.py's ``fit``), as the doctor's findings."""
    return [
        Finding("gpu-build", status, detail, fix)
        for status, detail, fix in accel.fit(variant, built_cuda, box)
    ]


def _reach(kind: str, url: str) -> Finding:
    where = url.split("@")[-1]  # never print a password
    try:
        if kind == "redis":
            import redis

            client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
            with contextlib.closing(client):
                client.ping()
        else:
            from sqlalchemy import create_engine, text

            engine = create_engine(url, connect_args={"connect_timeout": 3})
            try:
                with engine.connect() as conn:
                    conn.execute(text("select 1"))
            finally:
                engine.dispose()
    except Exception as exc:
        return Finding(
            kind,
            "fail",
            f"{where} cannot be reached: {str(exc).splitlines()[0][:200]}",
            f"start {kind} or correct its URL; every gateway needs it",
        )
    return Finding(kind, "ok", f"{where} answers")
