"""The local server's supervisor ends every process the server started: after a crash, before the
restart, and at stop. A stand-in server (a Python script in place of vLLM's interpreter) starts the
shapes vLLM's processes take and the ones that try to get away:

- ``worker``: a child in the server's session (vLLM's EngineCore);
- ``tracker``: a child that ignores SIGTERM (multiprocessing's resource tracker does);
- ``orphan``: a grandchild whose parent exits at once (reparented to init, still in the session);
- ``setsid``: a grandchild that leaves the session, under a parent that stays;
- ``escaped``: a grandchild that leaves the session and whose parent then exits (known only
  because the supervisor recorded it while the server ran).
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import alive
from tiers.cloud import LocalServer
from tiers.cloud import _local as local
from tiers.cloud._local import LocalVLLMServer
from tiers.cloud._session import ServerSession, session_of

SHAPES = {"server", "worker", "tracker", "orphan", "setsid", "escaped"}

STAND_IN = """#!{python}
import os, signal, sys, time

record = os.path.join({folder!r}, str(os.getpid()))

def note(name):
    with open(record, "a") as out:
        out.write(f"{{name}} {{os.getpid()}}\\n")

def child(body):
    if os.fork() == 0:
        try:
            body()
        finally:
            os._exit(0)

def sleep():
    while True:
        time.sleep(60)

def worker():
    note("worker"); sleep()

def tracker():
    signal.signal(signal.SIGTERM, signal.SIG_IGN); note("tracker"); sleep()

def orphan_parent():
    child(lambda: (note("orphan"), sleep()))

def setsid_parent():
    child(lambda: (os.setsid(), note("setsid"), sleep()))
    sleep()

def escaped_parent():
    child(lambda: (os.setsid(), note("escaped"), sleep()))
    time.sleep(1.0)  # long enough to be recorded, then the grandchild is init's

for body in (worker, tracker, orphan_parent, setsid_parent, escaped_parent):
    child(body)
note("server")
sleep()
"""


def _stand_in(folder: Path) -> Path:
    python = folder / "python"
    python.write_text(STAND_IN.format(python=sys.executable, folder=str(folder / "records")))
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    (folder / "records").mkdir()
    return python


def _recorded(folder: Path, server: int) -> dict[str, int]:
    path = folder / "records" / str(server)
    lines = path.read_text().split("\n") if path.exists() else []
    return {name: int(pid) for name, pid in (line.split() for line in lines if line)}


async def _all_started(folder: Path, server: int) -> dict[str, int]:
    deadline = time.monotonic() + 20
    while (found := _recorded(folder, server)).keys() != SHAPES:
        assert time.monotonic() < deadline, f"the stand-in started only {sorted(found)}"
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.5)  # the escaped one's parent exits; the supervisor recorded it before
    return found


def _living(pids: dict[str, int]) -> list[str]:
    return sorted(name for name, pid in pids.items() if alive(pid))


async def test_a_crashed_server_leaves_nothing_behind_when_restarted_nor_at_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "NOTE_EVERY_S", 0.2)
    monkeypatch.setattr(local, "RESTART_GRACE_S", 1.0)
    server = LocalVLLMServer(
        LocalServer(python=str(_stand_in(tmp_path)), model_dir=str(tmp_path)), str(tmp_path)
    )
    await server.start()
    try:
        for _ in range(500):  # the supervisor's task spawns it
            if server._process is not None:
                break
            await asyncio.sleep(0.02)
        assert server._process is not None
        first = server._process.pid
        old = await _all_started(tmp_path, first)
        assert _living(old) == sorted(SHAPES)
        in_session = {p.pid for p in session_of(first)}
        assert in_session >= {old[n] for n in SHAPES - {"setsid", "escaped"}}
        assert not in_session & {old["setsid"], old["escaped"]}  # they left it

        os.kill(first, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while server._process.pid == first:  # the restart comes after the ending and the backoff
            assert time.monotonic() < deadline, server.status
            await asyncio.sleep(0.02)
        assert _living(old) == []
        assert session_of(first) == []

        new = await _all_started(tmp_path, server._process.pid)
    finally:
        await server.stop(grace_s=1.0)
    assert _living(new) == []  # the tracker too: SIGKILL after the grace
    assert session_of(new["server"]) == []
    assert server.status == "stopped"


async def test_a_process_that_left_the_session_is_reached_only_if_recorded(tmp_path: Path) -> None:
    python = _stand_in(tmp_path)
    process = await asyncio.create_subprocess_exec(str(python), start_new_session=True)
    session = ServerSession(process.pid)
    started = await _all_started(tmp_path, process.pid)
    await asyncio.to_thread(session.note)  # the escaped one's parent has exited: it is not found again
    assert "escaped" in _living(started)
    try:
        # all but the escaped one, and the setsid one's parent (the others' have exited)
        assert await session.end(grace_s=0.5) == len(SHAPES)
    finally:
        await process.wait()
    assert _living(started) == ["escaped"]  # never recorded while its parent lived: out of reach
    os.kill(started["escaped"], signal.SIGKILL)
