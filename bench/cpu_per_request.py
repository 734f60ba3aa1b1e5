"""The gateway's CPU per request, two commits side by side in one run: a JSON and a streamed chat
request, the old code and the new alternated.

Method
------
* Each side (``--baseline``, ``--candidate``) is a checkout: a commit is checked out with ``git
  worktree add --detach`` into a temporary folder (removed at the end); without ``--candidate``
  the candidate is this working tree as it is.  Each side's gateway is its own process, started
  as ``python -m gateway serve`` from the checkout (its folder first on ``sys.path`` and in
  ``PYTHONPATH``; no module path of the gateway is named here, so a commit from before and after
  the regrouping of ``gateway/`` both run) with this virtual environment's Python, pinned with
  ``taskset`` to core 0.  Settings as in ``bench/overhead.py``: edge off, cloud = the stand-in,
  result cache off, the model ``cloud`` named (no routing choice), key auth with the first run's
  tenant key; each side has its own data folder.  One difference: the learner's background refit
  (at most once per 30 s, ~0.5 s of CPU in a child process: a cost per unit of time, not per
  request) runs only in the warm-up (``router.predictor.refit_interval_s = 1e9``), since at its
  default it lands in one measured window or another at random (``--with-refits`` leaves it).
* One fast upstream stand-in (``bench/upstream.py``: a fixed completion, or a 4-chunk SSE stream)
  and the load generator (``bench/loadgen.py``, in this process) share core 1.
* Load: closed loop, ``--connections`` clients (64, as the "sustained" row of
  ``bench/overhead.py``, where the ~0.47 ms figure comes from), a fixed number of requests per
  run (``--requests``); or, with ``--rate``, open loop at that many requests/s, evenly spaced.
  CPU per request depends on the load: a saturated event loop handles several requests per turn
  and spends less per request than one woken for each.  Closed loop saturates the gateway only
  while the load generator keeps up, so the table gives how busy the gateway's core was; on a
  machine whose other core is busy with other work, a fixed rate both sides sustain may compare
  more evenly.
* Warm-up: each gateway first answers ``--warmup`` JSON and as many streamed requests, not
  measured (imports, first refits, connection pools).
* Rounds: baseline, candidate, baseline, candidate, ... (``--rounds`` per side); in each, the
  side gets ``--requests`` JSON requests, then ``--requests`` streamed ones.  Around each run
  the gateway process's CPU time is read from ``/proc`` (utime + stime of the process and its
  live children, ``bench.overhead.cpu_seconds``), the "after" reading 0.3 s after the last
  answer so deferred work (ledger writes) is counted.  CPU ms per request = delta / answered
  requests.  The table gives the median over rounds with the range, and candidate / baseline:
  the ratio of the medians and the range of the per-round ratios (round i against round i).
* ``--profile``: then the candidate gets ``--profile-requests`` more JSON requests under py-spy
  (sampling at 250 Hz without stopping it, Python stacks by thread, idle threads left out), itself on
  core 1.  py-spy counts a thread that is runnable but waiting for the core as busy, which on one
  core over-counts the helper threads beside the event loop, so each thread's samples are
  weighted by that thread's CPU seconds over the run (``/proc/PID/task/TID/stat``).  The weights
  are summed by thread, by area (package, or module of the project's own code) and by function
  (self and cumulative) into ``bench/results/cpu_profile.txt``, each share also in microseconds
  of the candidate's median CPU per JSON request.  Time in C (uvloop's loop, httptools, msgspec,
  sqlite) counts to the Python function that called it.

    .venv/bin/python -m bench.cpu_per_request --baseline 2a89334 [--candidate HEAD] [--rounds 5]
        [--requests 5000] [--body plain|tools] [--profile]

Prints a table and writes bench/results/cpu_per_request.json (``--output``).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import loadgen
from bench.overhead import BODY, Target, children, cpu_seconds, free_port, start, wait_for_file, wait_ready

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "cpu_per_request.json"
PROFILE = ROOT / "bench" / "results" / "cpu_profile.txt"
GATEWAY_CORE, LOAD_CORE = "0", "1"
KINDS = ("json", "stream")
SETTLE_S = 0.3
PY_SPY_OPTIONS = [
    "--format",
    "raw",
    "--function",
    "--nonblocking",  # blocking (ptrace stops at every sample) adds a third to the CPU per request
    "--rate",
    "250",
    "--threads",
    "--subprocesses",
]
WORKING_TREE = "working tree"
# uvloop's loop is C: time in it (polling, socket reads and writes, callbacks' C parts) shows as
# the self time of the Python frame that runs it
LOOP_FRAME = "Runner.run (asyncio/runners.py"


@dataclass(frozen=True)
class Shape:
    """How the load comes: closed loop over ``connections``, or open loop at ``rate`` (requests/s)."""

    connections: int = 64
    rate: float | None = None

    def __str__(self) -> str:
        if self.rate is not None:
            return f"open loop at {self.rate:g} requests/s"
        return f"closed loop, {self.connections} connections"


@dataclass
class Side:
    name: str  # "baseline" or "candidate"
    ref: str  # as asked
    commit: str  # the commit it resolved to (for the working tree: HEAD, plus "+ changes")
    checkout: Path
    temporary: bool  # a worktree this script added (and removes)
    target: Target = field(default_factory=lambda: Target("gateway", 0))
    cpu_ms: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    rps: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})
    busy: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in KINDS})  # CPU s per s
    errors: int = 0


# ---------------------------------------------------------------------------- checkouts


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def checkout(name: str, ref: str | None, tmp: Path) -> Side:
    """A side: ``ref`` checked out into a detached worktree under ``tmp``; None is this working tree."""
    if ref is None:
        dirty = bool(git("status", "--porcelain", "--untracked-files=no").strip())
        head = git("rev-parse", "--short=12", "HEAD").strip()
        return Side(name, WORKING_TREE, head + (" + changes" if dirty else ""), ROOT, temporary=False)
    commit = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
    path = tmp / f"{name}-{commit[:12]}"
    git("worktree", "add", "--detach", "--quiet", str(path), commit)
    return Side(name, ref, commit[:12], path, temporary=True)


def remove_checkout(side: Side) -> None:
    if side.temporary:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(side.checkout)], check=False
        )


# ---------------------------------------------------------------------------- processes


def gateway_env(side: Side, upstream_port: int, data: Path, hold_refits: bool = True) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TIERGATE_") or k == "TIERGATE_BUILD_CACHE_DIR"
    }
    return {
        **env,
        "PYTHONPATH": str(side.checkout),
        "TIERGATE_EDGE__ENABLED": "false",
        "TIERGATE_CLOUD__URLS": f"http://127.0.0.1:{upstream_port}",
        "TIERGATE_DATA_DIR": str(data),
        "TIERGATE_SERVER__LOG_LEVEL": "warning",
        # measured: the request path with auth, limits, ledger and admission; no result cache
        "TIERGATE_CACHE__ENABLED": "false",
        # the learner's background refit (at most one per 30 s, ~0.5 s of CPU in a child process,
        # a cost per unit of time, not per request) only once, in the warm-up: left at its default
        # it lands in one measured window or another at random
        **({"TIERGATE_ROUTER__PREDICTOR__REFIT_INTERVAL_S": "1e9"} if hold_refits else {}),
    }


def check_imports(side: Side, env: dict[str, str]) -> None:
    """The gateway's packages must come from the side's checkout, not from an installed copy."""
    code = "import gateway, router, tiers; print(gateway.__file__, router.__file__, tiers.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=side.checkout, env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    outside = [f for f in out if not Path(f).resolve().is_relative_to(side.checkout.resolve())]
    if outside:
        raise RuntimeError(f"{side.name}: imported from outside {side.checkout}: {outside}")


def start_gateway(side: Side, upstream_port: int, tmp: Path, hold_refits: bool = True) -> None:
    data = tmp / f"data-{side.name}"
    env = gateway_env(side, upstream_port, data, hold_refits)
    check_imports(side, env)
    port = free_port()
    log = (tmp / f"{side.name}.log").open("wb")
    # cwd = the checkout: ``python -m`` puts the current folder first on sys.path
    process = subprocess.Popen(
        ["taskset", "-c", GATEWAY_CORE, sys.executable, "-m", "gateway", "serve", "--port", str(port)],
        cwd=side.checkout,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    side.target = Target(side.name, port, process)
    wait_for_file(data / "initial-credentials.json", timeout=120)
    side.target.api_key = json.loads((data / "initial-credentials.json").read_text())["tenant_key"]


def stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is not None and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()


# ---------------------------------------------------------------------------- measuring


# ``--body tools``: the request an agent sends (two function tools with JSON-schema parameters,
# tool_choice auto, a tool-call round trip in the history), to measure what parsing and checking them
# costs; a gateway from before tools were read drops these fields unread, so the ratio is that cost.
_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
_SEARCH = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "maxLength": 200},
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "filters": {"type": "array", "items": {"type": "string", "enum": ["news", "docs", "code"]}},
    },
    "required": ["query"],
}
TOOLS_BODY = {
    **BODY,
    "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": "Weather now", "parameters": _CITY},
        },
        {"type": "function", "function": {"name": "search", "description": "Search", "parameters": _SEARCH}},
    ],
    "tool_choice": "auto",
}


def bodies(kind_of_body: str = "plain") -> dict[str, bytes]:
    base = TOOLS_BODY if kind_of_body == "tools" else BODY
    return {kind: json.dumps({**base, "stream": kind == "stream"}).encode() for kind in KINDS}


def load(side: Side, body: bytes, requests: int, shape: Shape) -> tuple[int, int, float]:
    """``requests`` requests; (answered 200, failed, seconds)."""
    started = time.perf_counter()
    samples, _ = loadgen.run(
        side.target.url,
        body,
        requests=requests,
        connections=shape.connections,
        rate=shape.rate,
        headers={"Authorization": f"Bearer {side.target.api_key}"},
    )
    elapsed = time.perf_counter() - started
    ok = sum(s.ok for s in samples)
    return ok, len(samples) - ok, elapsed


def measure(side: Side, kind: str, body: bytes, requests: int, shape: Shape) -> float:
    """One measured run; appends and returns the CPU ms per answered request."""
    assert side.target.process is not None
    pid = side.target.process.pid
    before = cpu_seconds(pid)
    ok, failed, elapsed = load(side, body, requests, shape)
    time.sleep(SETTLE_S)
    used = cpu_seconds(pid) - before
    per_request = used * 1000 / max(ok, 1)
    side.cpu_ms[kind].append(per_request)
    side.rps[kind].append(ok / elapsed)
    side.busy[kind].append(used / (elapsed + SETTLE_S))
    side.errors += failed
    return per_request


def summarize(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "spread_pct": 100 * (max(values) - min(values)) / statistics.median(values),
    }


def compare(baseline: Sequence[float], candidate: Sequence[float]) -> dict[str, float]:
    """candidate / baseline: the ratio of the medians, and the range of the per-round ratios."""
    paired = [c / b for b, c in zip(baseline, candidate, strict=True)]
    return {
        "ratio": statistics.median(candidate) / statistics.median(baseline),
        "round_ratio_min": min(paired),
        "round_ratio_median": statistics.median(paired),
        "round_ratio_max": max(paired),
    }


def table(report: dict[str, object]) -> str:
    sides: dict[str, dict[str, object]] = report["sides"]  # type: ignore[assignment]
    base, cand = sides["baseline"], sides["candidate"]
    lines = [
        f"CPU ms per request, median over {report['rounds']} rounds (min-max); gateway on one core; "
        f"{report['requests']} requests per kind per round, {report['load']}",
        f"baseline  = {base['ref']} ({base['commit']})",
        f"candidate = {cand['ref']} ({cand['commit']})",
        f"{'kind':<7} {'baseline':>22} {'candidate':>22} {'cand/base':>10} {'per-round ratios':>17}",
    ]
    for kind in KINDS:
        b = base["cpu_ms"][kind]  # type: ignore[index]
        c = cand["cpu_ms"][kind]  # type: ignore[index]
        r = report["ratio"][kind]  # type: ignore[index]
        lines.append(
            f"{kind:<7} {b['median']:>8.3f} ({b['min']:.3f}-{b['max']:.3f}) "
            f"{c['median']:>8.3f} ({c['min']:.3f}-{c['max']:.3f}) {r['ratio']:>10.3f} "
            f"{r['round_ratio_min']:>8.3f}-{r['round_ratio_max']:.3f}"
        )
    rps = ", ".join(
        f"{kind} {base['rps_median'][kind]:.0f} / {cand['rps_median'][kind]:.0f}"  # type: ignore[index]
        for kind in KINDS
    )
    lines.append(f"served RPS, baseline / candidate (median): {rps}")
    busy = ", ".join(
        f"{kind} {base['gateway_core_busy_median'][kind]:.0%} / "  # type: ignore[index]
        f"{cand['gateway_core_busy_median'][kind]:.0%}"  # type: ignore[index]
        for kind in KINDS
    )
    lines.append(f"gateway's core busy (CPU s per s), baseline / candidate: {busy}")
    lines.append(
        f"idle CPU after the warm-up, ms per s: baseline {base['idle_cpu_ms_per_s']:.1f}, "
        f"candidate {cand['idle_cpu_ms_per_s']:.1f}"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------- profile


OWN_CODE = ("gateway", "router", "tiers", "cache")
OWN_SIDE, OTHER_SIDE = "the project's code (gateway/, router/, tiers/, cache/)", "everything else"


def frame_area(frame: str) -> str:
    """Where a py-spy frame ``func (path:line)`` belongs: a gateway/router/... module, or a package."""
    if frame.startswith(LOOP_FRAME):
        return "uvloop (C, the event loop itself)"
    path = frame.rsplit(" (", 1)[1].rsplit(":", 1)[0] if " (" in frame else frame
    path = path.split("site-packages/")[-1]
    parts = [p for p in Path(path).parts if p not in ("/",)]
    for own in ("gateway", "router", "tiers", "cache", "admin_ui", "bench"):
        if own in parts:
            rest = parts[parts.index(own) :]
            return "/".join([*rest[:-1], rest[-1].removesuffix(".py")]) if len(rest) > 1 else own
    stdlib = [i for i, p in enumerate(parts) if p.startswith("python3")]
    if stdlib:
        parts = parts[stdlib[-1] + 1 :]  # the standard library, named by its full path
    return parts[0].removesuffix(".py") if parts else "?"


@dataclass
class Folded:
    """Samples summed by frame; with CPU per thread, each thread's samples weigh its CPU seconds."""

    total: float = 0.0
    own: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))
    cumulative: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))
    threads: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))  # "tid name"


def parse_stack(line: str) -> tuple[int | None, str, list[str], int] | None:
    """One raw line of ``py-spy record --threads --subprocesses`` → (tid, thread name, frames, count)."""
    stack, _, count_text = line.strip().rpartition(" ")
    if not stack or not count_text.isdigit():  # a process's command line can spill onto lines of its own
        return None
    tid, name, frames = None, "?", []
    for frame in stack.split(";"):
        if frame.startswith("thread ("):  # "thread (TID): NAME"
            head, _, name = frame.partition("): ")
            tid = int(head.removeprefix("thread ("), 0)
        elif frame and not frame.startswith("process "):
            frames.append(frame)
    return (tid, name, frames, int(count_text)) if frames else None


def fold(stacks: Iterable[str], cpu_by_tid: dict[int, float] | None = None) -> Folded:
    """py-spy's raw (collapsed) lines → self and cumulative weights by frame.

    A frame counts once per stack in the cumulative sum, however often it recurs in it.  Given
    each thread's CPU seconds over the sampled run (``cpu_by_tid``), a thread's samples share out
    its CPU: py-spy counts a thread that is runnable but waiting for the core as busy, which on
    one core over-counts the helper threads next to the event loop.  CPU of a thread that was
    never sampled busy is kept as one "[thread NAME, not sampled]" frame."""
    parsed = [p for p in map(parse_stack, stacks) if p is not None]
    samples: collections.Counter[int | None] = collections.Counter()
    for tid, _, _, count in parsed:
        samples[tid] += count
    out = Folded()
    for tid, name, frames, count in parsed:
        weight: float = count
        if cpu_by_tid is not None:
            weight = count * cpu_by_tid.get(tid, 0.0) / samples[tid] if tid is not None else 0.0
        out.total += weight
        out.threads[f"{tid} {name}"] += weight
        out.own[frames[-1]] += weight
        for frame in set(frames):
            out.cumulative[frame] += weight
    for tid, seconds in (cpu_by_tid or {}).items():
        if tid not in samples and seconds > 0:
            frame = f"[thread {tid}, not sampled]"
            out.total += seconds
            out.threads[frame] += seconds
            out.own[frame] += seconds
            out.cumulative[frame] += seconds
    return out


def profile_report(
    stacks: list[str],
    us_per_request: float,
    header: Sequence[str],
    cpu_by_tid: dict[int, float] | None = None,
    top: int = 30,
) -> str:
    folded = fold(stacks, cpu_by_tid)
    total = folded.total or 1.0
    areas: dict[str, float] = collections.defaultdict(float)
    sides: dict[str, float] = collections.defaultdict(float)
    for frame, weight in folded.own.items():
        area = frame_area(frame)
        areas[area] += weight
        sides[OWN_SIDE if area.split("/")[0] in OWN_CODE else OTHER_SIDE] += weight

    def rows(weights: dict[str, float], n: int) -> list[str]:
        heaviest = sorted(weights.items(), key=lambda item: -item[1])[:n]
        return [
            f"{100 * w / total:6.1f} % {us_per_request * w / total:8.1f} us  {name}" for name, w in heaviest
        ]

    # the entry chain (runpy, the CLI, uvicorn's Server.run, asyncio's Runner.run) is on every
    # stack of the event loop: left out of the cumulative list
    top_weight = max(folded.cumulative.values(), default=0.0)
    below_entry = {f: w for f, w in folded.cumulative.items() if w < 0.995 * top_weight}

    weighting = "each thread's samples weighted by its CPU from /proc" if cpu_by_tid else "raw samples"
    return "\n".join(
        [
            *header,
            f"shares of the gateway's CPU ({weighting}; idle left out); us = the share of "
            f"{us_per_request:.1f} us, the candidate's median CPU per JSON request in the rounds",
            "",
            "== by thread",
            *rows(folded.threads, top),
            "",
            "== by side (self time: in the project's own modules, or in the server, the framework, the",
            "   libraries, the standard library and the event loop they call)",
            *rows(sides, 2),
            "",
            "== by area (self time summed by package, or by module for the project's own code)",
            *rows(areas, top),
            "",
            "== top functions by self time",
            *rows(folded.own, top),
            "",
            "== top functions by cumulative time (the function and what it calls; not the entry chain)",
            *rows(below_entry, top),
            "",
        ]
    )


def thread_cpu(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds (utime + stime) of each thread of ``pids``, by thread id."""
    found = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def py_spy() -> str | None:
    found = Path(sys.executable).with_name("py-spy")
    return str(found) if found.exists() else shutil.which("py-spy")


def run_profile(
    side: Side, body: bytes, requests: int, shape: Shape, us_per_request: float, tmp: Path
) -> str:
    spy = py_spy()
    if spy is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    assert side.target.process is not None
    pid = side.target.process.pid
    raw = tmp / "profile.txt"
    # py-spy on the load core: its sampling does not take the gateway's core
    recorder = start(
        [spy, "record", "--pid", str(pid), "--output", str(raw), *PY_SPY_OPTIONS],
        LOAD_CORE,
        log=tmp / "py-spy.log",
    )
    time.sleep(2)  # attached
    if recorder.poll() is not None:
        raise SystemExit(f"py-spy stopped: {(tmp / 'py-spy.log').read_text()}")
    try:
        threads_before, cpu_before = thread_cpu([pid, *children(pid)]), cpu_seconds(pid)
        ok, failed, elapsed = load(side, body, requests, shape)
        time.sleep(SETTLE_S)
        threads_after, cpu_after = thread_cpu([pid, *children(pid)]), cpu_seconds(pid)
    finally:
        recorder.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        try:
            recorder.wait(60)
        except subprocess.TimeoutExpired:
            recorder.kill()
    used = {tid: s - threads_before.get(tid, 0.0) for tid, s in threads_after.items()}
    header = [
        f"py-spy record {' '.join(PY_SPY_OPTIONS)}",
        f"on the candidate ({side.ref}, {side.commit}): {ok} JSON requests ({failed} failed), "
        f"{shape}, {ok / elapsed:.0f} RPS and "
        f"{1000 * (cpu_after - cpu_before) / max(ok, 1):.3f} CPU ms per request while sampled",
    ]
    return profile_report(raw.read_text().splitlines(), us_per_request, header, used)


# ---------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="a commit-ish")
    parser.add_argument("--candidate", help="a commit-ish [default: this working tree]")
    parser.add_argument("--rounds", type=int, default=5, help="measured rounds per side")
    parser.add_argument(
        "--body",
        choices=("plain", "tools"),
        default="plain",
        help="plain chat, or an agent's request with tools",
    )
    parser.add_argument("--requests", type=int, default=5000, help="requests per kind per round")
    parser.add_argument("--connections", type=int, default=64, help="closed loop: concurrent clients")
    parser.add_argument("--rate", type=float, help="open loop at this many requests/s instead")
    parser.add_argument("--warmup", type=int, default=2000, help="requests per kind per side first")
    parser.add_argument(
        "--with-refits", action="store_true", help="leave the learner's refits at their default (30 s)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON report [default: %(default)s]")
    parser.add_argument("--profile", action="store_true", help="then profile the candidate (py-spy)")
    parser.add_argument("--profile-requests", type=int, default=20000)
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(LOAD_CORE)})  # the load generator, beside the stand-in
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-cpu-"))
    sides: list[Side] = []
    upstream = Target("upstream", free_port())
    try:
        sides.append(checkout("baseline", args.baseline, tmp))
        sides.append(checkout("candidate", args.candidate, tmp))
        upstream.process = start([sys.executable, "bench/upstream.py", str(upstream.port)], LOAD_CORE)
        for side in sides:
            start_gateway(side, upstream.port, tmp, hold_refits=not args.with_refits)
        for side in sides:
            wait_ready(side.target, timeout=180)
        report = run(sides, args, tmp)
    finally:
        for side in sides:
            stop(side.target.process)
        stop(upstream.process)
        for side in sides:
            remove_checkout(side)
        shutil.rmtree(tmp, ignore_errors=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.output}")
    if args.profile:
        print(f"wrote {PROFILE.relative_to(ROOT)}")


def quiet(side: Side, below_ms_per_s: float = 30.0, timeout: float = 30.0) -> float:
    """Wait until the gateway's CPU with no request coming (its timers, the first refit started in
    the warm-up) is below ``below_ms_per_s``; the last second's rate, ms per s."""
    assert side.target.process is not None
    deadline = time.monotonic() + timeout
    while True:
        before = cpu_seconds(side.target.process.pid)
        time.sleep(1.0)
        rate = 1000 * (cpu_seconds(side.target.process.pid) - before)
        if rate < below_ms_per_s or time.monotonic() > deadline:
            return rate


def run(sides: list[Side], args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    body = bodies(args.body)
    shape = Shape(args.connections, args.rate)
    for side in sides:
        for kind in KINDS:
            load(side, body[kind], args.warmup, shape)
    idle = {side.name: quiet(side) for side in sides}
    for i in range(args.rounds):
        for side in sides:
            cells = [f"{kind} {measure(side, kind, body[kind], args.requests, shape):.3f}" for kind in KINDS]
            print(f"round {i + 1} {side.name:<9} CPU ms/request: {', '.join(cells)}", flush=True)
    base, cand = sides
    report: dict[str, object] = {
        "method": __doc__,
        "command": " ".join(["python -m bench.cpu_per_request", *sys.argv[1:]]),
        "rounds": args.rounds,
        "requests": args.requests,
        "body": args.body,
        "load": str(shape),
        "warmup": args.warmup,
        "refits_held": not args.with_refits,
        "cpus": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "sides": {
            s.name: {
                "ref": s.ref,
                "commit": s.commit,
                "cpu_ms": {k: summarize(s.cpu_ms[k]) for k in KINDS},
                "cpu_ms_rounds": s.cpu_ms,
                "rps_median": {k: statistics.median(s.rps[k]) for k in KINDS},
                "gateway_core_busy_median": {k: statistics.median(s.busy[k]) for k in KINDS},
                "errors": s.errors,
                "idle_cpu_ms_per_s": idle[s.name],
            }
            for s in sides
        },
        "ratio": {k: compare(base.cpu_ms[k], cand.cpu_ms[k]) for k in KINDS},
    }
    print()
    print(table(report))
    if base.errors or cand.errors:
        print(f"failed requests: baseline {base.errors}, candidate {cand.errors}")
    if args.profile:
        us = 1000 * statistics.median(cand.cpu_ms["json"])
        text = run_profile(cand, body["json"], args.profile_requests, shape, us, tmp)
        PROFILE.write_text(text)
        print("\n" + "\n".join(text.splitlines()[:40]))
    return report


if __name__ == "__main__":
    main()
