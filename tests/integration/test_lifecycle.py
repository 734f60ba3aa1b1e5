"""Starting, configuring and stopping the gateway as an operator does."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import TIERGATE, Gateway, alive, children
from tiers import split_cpus, usable_cpus


def test_help_explains_every_command() -> None:
    out = subprocess.run([TIERGATE, "--help"], capture_output=True, text=True, check=True).stdout
    assert "serve" in out and "config" in out
    serve = subprocess.run([TIERGATE, "serve", "--help"], capture_output=True, text=True, check=True).stdout
    for option in ("--config", "--host", "--port", "TIERGATE_"):
        assert option in serve


def test_config_shows_file_and_environment(tmp_path: Path) -> None:
    config = tmp_path / "t.toml"
    config.write_text("[server]\nport = 9999\n")
    out = subprocess.run(
        [TIERGATE, "config", "--config", str(config)],
        capture_output=True,
        text=True,
        check=True,
        env={"TIERGATE_EDGE__MAX_QUEUE": "7", "PATH": "/usr/bin:/bin"},
    ).stdout
    assert '"port": 9999' in out and '"max_queue": 7' in out


def test_a_bad_setting_stops_start_up_with_a_clear_message(tmp_path: Path) -> None:
    result = subprocess.run(
        [TIERGATE, "serve"],
        capture_output=True,
        text=True,
        env={"TIERGATE_SERVER__PORT": "http", "PATH": "/usr/bin"},
    )
    assert result.returncode == 2
    assert "server.port" in result.stderr


def test_sigterm_finishes_the_stream_in_flight_then_exits(edge_only: Gateway) -> None:
    body = {
        "model": "edge",
        "messages": [{"role": "user", "content": "Tell a story."}],
        "max_tokens": 48,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{edge_only.url}/v1/chat/completions", json=body, headers=edge_only.auth, timeout=60
    ) as resp:
        lines = resp.iter_lines()
        assert next(lines).startswith("data: ")
        edge_only.process.send_signal(signal.SIGTERM)
        rest = [line for line in lines if line]
        finished = time.monotonic()
    assert rest[-1] == "data: [DONE]"
    assert '"finish_reason":"length"' in rest[-2]
    # uvicorn re-raises the signal once it has shut down cleanly, so the exit reads as SIGTERM
    assert edge_only.process.wait(30) in (0, -signal.SIGTERM)
    assert time.monotonic() - finished < 10
    assert "Application shutdown complete" in edge_only.log()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{edge_only.url}/healthz")


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError:  # the process ended meanwhile
        return b""


def _threads(pid: int) -> list[int]:
    try:
        return [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []


def _affinity(tid: int) -> frozenset[int] | None:
    try:
        return frozenset(os.sched_getaffinity(tid))
    except OSError:  # the thread ended meanwhile
        return None


def _descendants(pid: int) -> set[int]:
    found = children(pid)
    for child in list(found):
        found |= _descendants(child)
    return found


@pytest.mark.cloud
@pytest.mark.skipif(len(usable_cpus()) < 2, reason="one CPU is not split")
def test_the_edge_and_the_local_vllm_server_run_on_their_own_cpus(cloud_gateway: Gateway) -> None:
    edge, server = split_cpus(usable_cpus())
    vllm = [
        pid for pid in _descendants(cloud_gateway.process.pid) if b"vllm" in _read(f"/proc/{pid}/cmdline")
    ]
    assert vllm, "the gateway should have started a vLLM server"
    # the server, its engine process and every thread they run (OpenMP's too)
    affinities = {_affinity(t) for pid in vllm for t in _threads(pid)} - {None}
    assert affinities == {frozenset(server)}
    # the edge's worker thread in the gateway's process (the event loop's is not pinned)
    affinities = {_affinity(t) for t in _threads(cloud_gateway.process.pid)}
    assert frozenset(edge) in affinities
    assert frozenset(server) not in affinities


@pytest.mark.cloud
def test_stopping_the_gateway_stops_its_vllm_server(cloud_gateway: Gateway) -> None:
    """Runs last in the session (see conftest): it stops the shared gateway."""
    spawned = children(cloud_gateway.process.pid)
    assert spawned, "the gateway should have started a vLLM server"
    assert cloud_gateway.stop() in (0, -signal.SIGTERM)
    # Its helpers (vLLM, the media decode workers, the router's refit worker, the ledger writer) end
    # with it: at once or, for those that notice their parent is gone, within a few seconds.
    deadline = time.monotonic() + 10
    while [pid for pid in spawned if alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in spawned if alive(pid)]
