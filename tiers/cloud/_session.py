"""Ending every process a server started: its session, and what left the session.

The local vLLM server runs in a session of its own (``start_new_session``: the session id is the
server's pid). What it starts — the EngineCore, its Workers, multiprocessing's resource tracker —
stays in that session even when the server dies and they are reparented to init, so a scan of
``/proc`` for that session id finds them all, where signalling the server, or its process group
once, misses what the server's death left behind (the EngineCore, 0.8 GiB, and a Worker, 3.3 GiB,
kept running next to the restarted server). ``PR_SET_PDEATHSIG`` reaches only the server itself:
the kernel clears it in every process the server forks.

A process that calls ``setsid`` leaves the session; it is found as a descendant (by parent pid) of
the session's members, and :meth:`ServerSession.note` records what is there while the server runs,
so one whose parent has died by the end is still known. A process is named by its pid and its
start time, so a pid reused by an unrelated process is never signalled; signals go through a pidfd
opened on the process that was checked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PROC = Path("/proc")
# How often the end checks whether the signalled processes are gone.
_POLL_S = 0.05
# After SIGKILL: a process in uninterruptible sleep can take a moment to go.
_KILL_WAIT_S = 5.0


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    ppid: int
    sid: int
    start: int  # clock ticks after boot: with the pid, names one process for good
    zombie: bool


def read_proc(pid: int) -> Proc | None:
    """One process's ``/proc/<pid>/stat``; None when it is gone."""
    try:
        text = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: the fields follow its last ')'.
    fields = text[text.rfind(b")") + 2 :].split()
    # state ppid pgrp session ... starttime (field 22 of the whole line, 20 after the name)
    return Proc(pid, int(fields[1]), int(fields[3]), int(fields[19]), fields[0] == b"Z")


def scan() -> dict[int, Proc]:
    """Every process on the machine (a few milliseconds for a few hundred)."""
    found: dict[int, Proc] = {}
    for entry in os.listdir(_PROC):
        if entry.isdigit() and (proc := read_proc(int(entry))) is not None:
            found[proc.pid] = proc
    return found


def session_of(sid: int, procs: dict[int, Proc] | None = None) -> list[Proc]:
    """The living processes of session ``sid`` (zombies are dead: only their parent's wait is left)."""
    procs = scan() if procs is None else procs
    return [p for p in procs.values() if p.sid == sid and not p.zombie]


def descendants(roots: set[int], procs: dict[int, Proc]) -> set[int]:
    """``roots`` and every process below them, by parent pid."""
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


class ServerSession:
    """The processes of one server started with ``start_new_session`` (``leader`` is its pid)."""

    def __init__(self, leader: int) -> None:
        self.leader = leader
        self._known: dict[int, int] = {}  # pid -> start time, of every process seen in it

    def note(self) -> None:
        """Record the processes there now (blocking: a /proc scan; call it from a thread)."""
        self._known.update((p.pid, p.start) for p in self.members().values())

    def members(self) -> dict[int, Proc]:
        """The living processes of the session, those recorded before, and all their descendants."""
        procs = scan()
        roots = {p.pid for p in session_of(self.leader, procs)}
        roots |= {pid for pid, start in self._known.items() if pid in procs and procs[pid].start == start}
        return {pid: procs[pid] for pid in descendants(roots, procs) if not procs[pid].zombie}

    async def end(self, grace_s: float) -> int:
        """SIGTERM to every member, SIGKILL to those left after ``grace_s``; returns how many there were.

        The grace lets the resource tracker, which ignores SIGTERM, see its users go and remove the
        shared memory they leaked before it exits by itself.
        """
        members = await asyncio.to_thread(self.members)
        if not members:
            return 0
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, _KILL_WAIT_S)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.leader, sig)  # the group: also what was started since the scan
            for proc in members.values():
                _signal(proc, sig)
            deadline = time.monotonic() + wait_s
            while (left := await asyncio.to_thread(self.members)) and time.monotonic() < deadline:
                members.update(left)  # also what a member started meanwhile
                await asyncio.sleep(_POLL_S)
            if not left:
                break
            members.update(left)
            if sig == signal.SIGTERM:
                log.warning("still running %.0f s after SIGTERM, killed: %s", grace_s, _named(left))
        return len(members)


def _named(procs: dict[int, Proc]) -> str:
    """The processes as ``pid (command line)``, for the log."""
    names = []
    for pid in sorted(procs):
        with contextlib.suppress(OSError):
            command = (_PROC / str(pid) / "cmdline").read_bytes()[:60].replace(b"\0", b" ")
            names.append(f"{pid} ({command.decode(errors='replace').strip()})")
    return ", ".join(names)


def _signal(proc: Proc, sig: int) -> None:
    """Send ``sig`` to ``proc`` if it is still the process that was seen (not a reused pid)."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # gone
        return
    try:
        now = read_proc(proc.pid)
        if now is not None and now.start == proc.start:
            signal.pidfd_send_signal(fd, sig)
    except OSError:
        pass
    finally:
        os.close(fd)
