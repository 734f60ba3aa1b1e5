"""Starting, configuring and stopping the gateway as an operator does."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import CLOUD_START_TIMEOUT_S, TIERGATE, Gateway, children
from tiers import split_cpus, usable_cpus
from tiers.cloud._session import Proc, descendants, read_proc, scan, session_of


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


def _is_vllm(pid: int) -> bool:
    return b"vllm.entrypoints" in _read(f"/proc/{pid}/cmdline")


def _vllm_server(gateway: Gateway) -> int:
    """The local vLLM server the gateway started (its child running vLLM's API server)."""
    found = [p for p in children(gateway.process.pid) if _is_vllm(p)]
    assert len(found) == 1, f"vLLM servers under the gateway: {found}"
    return found[0]


def _tree(pid: int) -> list[Proc]:
    """``pid`` and every process below it, each named by pid and start time."""
    procs = scan()
    return [procs[p] for p in descendants({pid}, procs) if not procs[p].zombie]


def _living(procs: list[Proc]) -> list[str]:
    """Those of ``procs`` still running (the same process: a reused pid does not count), by command."""
    left = []
    for proc in procs:
        now = read_proc(proc.pid)
        if now is not None and now.start == proc.start and not now.zombie:
            left.append(_read(f"/proc/{proc.pid}/cmdline").replace(b"\0", b" ").decode(errors="replace")[:80])
    return left


@pytest.mark.cloud
def test_a_killed_vllm_server_is_restarted_with_nothing_of_it_left(cloud_gateway: Gateway) -> None:
    """Runs after the other cloud tests (see conftest): the cloud tier is away for a minute or two."""
    server = _vllm_server(cloud_gateway)
    old = _tree(server)
    in_session = session_of(server)
    assert len(old) >= 2 and len(in_session) >= 2, "vLLM runs its engine in a process of its own"
    print(f"\nthe vLLM server {server}: {len(old)} processes below it, {len(in_session)} in its session:")
    print("\n".join(_living(in_session)))
    os.kill(server, signal.SIGKILL)
    killed = time.monotonic()
    deadline = killed + 120
    while not [p for p in children(cloud_gateway.process.pid) if p != server and _is_vllm(p)]:
        assert time.monotonic() < deadline, "no new vLLM server within 120 s"
        time.sleep(0.05)
    # The restart comes after the dead server's session was ended.
    assert session_of(server) == []
    assert _living(old) == []
    restarted = time.monotonic() - killed
    cloud_gateway.wait(
        lambda: cloud_gateway.tier_health("cloud") == "ready", CLOUD_START_TIMEOUT_S, "the cloud"
    )
    print(f"restarted after {restarted:.1f} s, the cloud tier ready after {time.monotonic() - killed:.1f} s")


@pytest.mark.cloud
def test_stopping_the_gateway_stops_its_vllm_server(cloud_gateway: Gateway) -> None:
    """Runs last in the session (see conftest): it stops the shared gateway."""
    spawned = [p for p in _tree(cloud_gateway.process.pid) if p.pid != cloud_gateway.process.pid]
    server = _vllm_server(cloud_gateway)
    in_session = session_of(server)
    assert spawned, "the gateway should have started a vLLM server"
    print(f"\nthe gateway started {len(spawned)} processes; {len(in_session)} in the vLLM server's session")
    assert cloud_gateway.stop() in (0, -signal.SIGTERM)
    # The vLLM server's session is ended before the gateway exits, the resource tracker included.
    assert session_of(server) == []
    # Its other helpers (the media decode workers, the router's refit worker, the ledger writer) end
    # with it: at once or, for those that notice their parent is gone, within a few seconds.
    deadline = time.monotonic() + 10
    while _living(spawned) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _living(spawned) == []
