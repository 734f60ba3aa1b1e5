"""Which CPUs each tier's engine runs on, when both run on this machine.

The embedded defaults run the edge model in the gateway's process and a vLLM server beside it.
Both generate on the CPU, and if both may use every core, each steals time from the other at the
worst moments: vLLM binds its OpenMP thread to a core the edge thread also lands on, and the
server's scheduler and tokenizer processes run wherever they find room.  A short edge chat then
waits behind slices of cloud work.  Splitting the cores gives each tier its own: the edge keeps
the lower half (the gateway's event loop is not pinned and runs wherever the kernel finds room),
the vLLM server's processes and its OpenMP threads the upper half.

Explicit lists (``edge.cpus``, ``cloud.local.cpus``) override the split; on a machine that cannot
pin (not Linux) or with a single CPU nothing is pinned.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, in order; empty where the platform cannot say."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def check_cpus(setting: str, cpus: Sequence[int]) -> None:
    """Refuse a list naming a CPU this process may not run on (a typo would otherwise pin nothing,
    or keep vLLM from starting, far from the setting that caused it)."""
    usable = usable_cpus()
    missing = sorted(set(cpus) - set(usable)) if usable else []
    if missing:
        named = f"CPU{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
        raise ValueError(
            f"{setting}: this process may not run on {named} (it may use {', '.join(map(str, usable))})"
        )


def split_cpus(cpus: Sequence[int]) -> tuple[list[int], list[int]]:
    """The edge's and the local vLLM server's shares of ``cpus``: the lower half (rounded up) and the
    rest.  Fewer than two CPUs cannot be split: both get them all."""
    cpus = list(cpus)
    if len(cpus) < 2:
        return cpus, cpus
    half = (len(cpus) + 1) // 2
    return cpus[:half], cpus[half:]


def pin_this_thread(cpus: Sequence[int]) -> None:
    """Run the calling thread (and the threads it starts later) only on ``cpus``; no-op where the
    platform cannot or ``cpus`` is empty.  On Linux the affinity of pid 0 is the calling thread's."""
    if cpus and hasattr(os, "sched_setaffinity"):
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, set(cpus))


def cpu_list(cpus: Sequence[int]) -> str:
    """``cpus`` as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` spells them: ``"4,5,6,7"``."""
    return ",".join(str(c) for c in cpus)
