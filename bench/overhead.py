"""What tiergate adds to a request, next to calling the upstream directly, the web framework's floor,
LiteLLM's proxy and Portkey's gateway, all measured in the same run.

Method
------
* One fast OpenAI-compatible upstream stand-in (``bench/upstream.py``, raw asyncio on uvloop) answers a
  fixed completion, or a short SSE stream.
* Targets, each a separate process pinned with ``taskset`` to core 0: tiergate (edge off, cloud = the
  stand-in, model ``cloud`` pinned: no routing choice), the framework floor (``bench/floor_app.py``:
  Litestar on uvicorn returning the same canned answer) and, when its virtual environment exists,
  LiteLLM's proxy ``litellm[proxy]==1.106.2`` (never unpinned: 1.107.0 was compromised) with one worker,
  and Portkey's open-source gateway ``@portkey-ai/gateway@1.15.2`` (Node.js; installed on first use
  with ``npm install`` into the build cache, skipped with a message when npm or node is missing or
  the install fails; ``--no-portkey``), run with ``node`` (``build/start-server.js --headless``, one
  process).  Portkey is pointed at the stand-in per request, as its README does for a self-hosted
  OpenAI-compatible server: headers ``x-portkey-provider: openai`` and ``x-portkey-custom-host:
  http://127.0.0.1:PORT/v1`` (loopback is on its default list of trusted custom hosts).  One
  workaround, loaded with ``node --import`` (``bench/portkey_fetch.mjs``): fetch's responses are
  copied into ones whose headers may be changed; without it every streamed request fails with
  "TypeError: immutable" (Portkey-AI/gateway issues 1389 and 1550).
  The stand-in and the load generator (``bench/loadgen.py``, in this process) share core 1.
* For each rate (requests/s) the load is open loop with evenly spaced arrivals (``bench/loadgen.py``:
  each request on an idle keep-alive connection or a new one, never held back by a slow earlier
  one, as wrk2 does; ``hey -q``, used before, fires its workers in lockstep bursts), and with
  ``--arrivals even,poisson`` also with Poisson arrivals at the same mean rate (exponential gaps,
  the same seeded arrival times for every target).  The targets
  are run interleaved in rounds (direct, floor, tiergate, litellm, direct, ...), ``--repeats``
  times, each for ``--duration`` seconds.  Non-streaming latency is the time from writing the
  request to the last byte; streaming latency is the time to the first body byte (the first SSE
  chunk).  *Added* latency = target percentile minus direct percentile of the same round; the
  table shows the median over rounds.
* Each target first gets ``--warmup`` seconds of load at the lowest rate, not measured (start-up
  work: worker pools spawning, first predictor refits, connections opening).
* Sustained RPS: closed loop, 64 connections, no rate limit. CPU seconds per 1,000 requests and peak RSS
  are read from /proc for the target process (and its children).

    .venv/bin/python -m bench.overhead [--rates 100,500,1000,2000] [--duration 5] [--repeats 3]
        [--arrivals even,poisson] [--no-litellm] [--no-portkey] [--output PATH]

Prints a table and writes bench/results/overhead.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench import loadgen

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "overhead.json"
LITELLM = (
    Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser() / "litellm-1.106.2"
)
PORTKEY_VERSION = "1.15.2"
PORTKEY = (
    Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
    / f"portkey-gateway-{PORTKEY_VERSION}"
)
PORTKEY_FETCH = ROOT / "bench" / "portkey_fetch.mjs"
SERVER_CORE, LOAD_CORE = "0", "1"
BODY = {"model": "cloud", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}


@dataclass
class Target:
    name: str
    port: int
    process: subprocess.Popen[bytes] | None = None
    api_key: str = "unused"
    samples: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    extra_headers: dict[str, str] = field(default_factory=dict)  # sent with every request

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", **self.extra_headers}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start(
    cmd: list[str], core: str, env: dict[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    out = log.open("wb") if log else subprocess.DEVNULL
    return subprocess.Popen(
        ["taskset", "-c", core, *cmd],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=out,
        stderr=subprocess.STDOUT,
    )


def wait_ready(target: Target, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.post(target.url, json=BODY, headers=target.headers, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{target.name} did not answer on port {target.port}")


def wait_for_file(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear")
        time.sleep(0.2)


def load(
    target: Target,
    body_file: Path,
    *,
    duration: float,
    rate: float | None,
    connections: int = 64,
    poisson: bool = False,
) -> list[dict[str, float]]:
    """One run of the load generator: open loop at ``rate`` (evenly spaced or Poisson arrivals), or
    closed loop over ``connections``."""
    samples, _failed = loadgen.run(
        target.url,
        body_file.read_bytes(),
        duration=duration,
        rate=rate,
        connections=connections,
        headers=target.headers,
        poisson=poisson,
    )
    return [{"total": s.total, "first_byte": s.first_byte, "ok": s.ok, "lag": s.lag} for s in samples]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))] if ordered else float("nan")


def cpu_seconds(pid: int) -> float:
    total = 0.0
    for p in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except OSError:
            pass
    return total


def peak_rss_mib(pid: int) -> float:
    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found + [g for c in found for g in children(c)]


def portkey_server() -> Path | None:
    """Portkey's ``start-server.js``, installed with npm into the build cache on first use; None
    (with the reason printed) when it cannot be."""
    script = PORTKEY / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    if script.exists():
        return script
    npm, node = shutil.which("npm"), shutil.which("node")
    if npm is None or node is None:
        print("portkey: skipped (needs node and npm on PATH)", flush=True)
        return None
    PORTKEY.mkdir(parents=True, exist_ok=True)
    print(f"portkey: npm install @portkey-ai/gateway@{PORTKEY_VERSION} into {PORTKEY}", flush=True)
    done = subprocess.run(
        [
            npm,
            "install",
            "--prefix",
            str(PORTKEY),
            "--no-audit",
            "--no-fund",
            "--save-exact",
            f"@portkey-ai/gateway@{PORTKEY_VERSION}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0 or not script.exists():
        print(f"portkey: skipped (npm install failed: {(done.stderr or done.stdout)[-500:]})", flush=True)
        return None
    return script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="100,500,1000,2000")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds of load per target first")
    parser.add_argument("--no-litellm", action="store_true")
    parser.add_argument("--no-portkey", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON report [default: %(default)s]")
    parser.add_argument(
        "--arrivals",
        default="even",
        help="open-loop arrivals, comma-separated: even, poisson [default: even]",
    )
    args = parser.parse_args()
    args.arrivals = args.arrivals.split(",")
    if not set(args.arrivals) <= {"even", "poisson"}:
        parser.error("--arrivals: even and/or poisson")
    os.sched_setaffinity(0, {int(LOAD_CORE)})  # the load generator runs here, beside the stand-in
    rates = [int(r) for r in args.rates.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-bench-"))
    python = sys.executable

    upstream = Target("direct", free_port())
    upstream.process = start([python, "bench/upstream.py", str(upstream.port)], LOAD_CORE)
    floor = Target("floor", free_port())
    floor.process = start([python, "-m", "bench.floor_app", str(floor.port)], SERVER_CORE)
    gateway = Target("tiergate", free_port())
    gateway.process = start(
        [str(Path(python).with_name("tiergate")), "serve", "--port", str(gateway.port)],
        SERVER_CORE,
        env={
            "TIERGATE_EDGE__ENABLED": "false",
            "TIERGATE_CLOUD__URLS": f"http://127.0.0.1:{upstream.port}",
            "TIERGATE_DATA_DIR": str(tmp / "data"),
            "TIERGATE_SERVER__LOG_LEVEL": "warning",
            # measured: the request path with auth, limits, ledger and admission; no result cache
            "TIERGATE_CACHE__ENABLED": "false",
        },
        log=tmp / "tiergate.log",
    )
    targets = [upstream, floor, gateway]
    litellm_bin = LITELLM / "bin" / "litellm"
    if not args.no_litellm and litellm_bin.exists():
        config = tmp / "litellm.yaml"
        config.write_text(
            "model_list:\n  - model_name: cloud\n    litellm_params:\n      model: openai/bench\n"
            f"      api_base: http://127.0.0.1:{upstream.port}/v1\n      api_key: unused\n"
            "litellm_settings:\n  telemetry: false\n"
        )
        lite = Target("litellm", free_port(), api_key="sk-bench-" + os.urandom(16).hex())
        lite.process = start(
            [str(litellm_bin), "--config", str(config), "--port", str(lite.port), "--num_workers", "1"],
            SERVER_CORE,
            env={"LITELLM_LOG": "ERROR", "LITELLM_TELEMETRY": "False", "LITELLM_MASTER_KEY": lite.api_key},
            log=tmp / "litellm.log",
        )
        targets.append(lite)
    portkey_script = None if args.no_portkey else portkey_server()
    if portkey_script is not None:
        portkey = Target(
            "portkey",
            free_port(),
            extra_headers={
                "x-portkey-provider": "openai",
                "x-portkey-custom-host": f"http://127.0.0.1:{upstream.port}/v1",
            },
        )
        portkey.process = start(
            [
                shutil.which("node") or "node",
                "--import",
                str(PORTKEY_FETCH),
                str(portkey_script),
                f"--port={portkey.port}",
                "--headless",
            ],
            SERVER_CORE,
            env={"NODE_ENV": "production"},
            log=tmp / "portkey.log",
        )
        targets.append(portkey)
    try:
        credentials = tmp / "data" / "initial-credentials.json"
        wait_for_file(credentials)
        gateway.api_key = json.loads(credentials.read_text())["tenant_key"]
        for t in targets:
            wait_ready(t, timeout=180)
        report = run(targets, rates, args, tmp)
    finally:
        for t in targets:
            if t.process and t.process.poll() is None:
                t.process.send_signal(signal.SIGTERM)
                try:
                    t.process.wait(15)
                except subprocess.TimeoutExpired:
                    t.process.kill()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2))
    print(f"\nwrote {args.output}")


def run(targets: list[Target], rates: list[int], args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    bodies = {}
    for mode in ("plain", "stream"):
        path = tmp / f"{mode}.json"
        path.write_text(json.dumps({**BODY, "stream": mode == "stream"}))
        bodies[mode] = path
    direct = targets[0]
    results: dict[str, object] = {
        "method": __doc__,
        "rates": {},
        "max": {},
        "machine": os.uname().machine,
        "duration_s": args.duration,
        "repeats": args.repeats,
        "warmup_s": args.warmup,
        "arrivals": args.arrivals,
        "targets": [t.name for t in targets],
    }
    for t in targets:  # start-up work (worker pools, first refits, connections) is not measured
        for mode in ("plain", "stream"):
            load(t, bodies[mode], duration=args.warmup / 2, rate=min(rates))
    for rate, arrivals in [(r, a) for r in rates for a in args.arrivals]:
        poisson = arrivals == "poisson"
        per_target: dict[str, dict[str, list[float]]] = {}
        for mode in ("plain", "stream"):
            key = "total" if mode == "plain" else "first_byte"
            for _round in range(args.repeats):
                base: dict[str, float] = {}
                for t in targets:
                    if t.name == "litellm" and rate > 500:
                        continue  # saturated far below this rate (see the max RPS row)
                    samples = load(t, bodies[mode], duration=args.duration, rate=rate, poisson=poisson)
                    ok = [s[key] for s in samples if s["ok"]]
                    stats = {q: pct(ok, q) * 1000 for q in (50, 95, 99)}
                    served = len(ok) / args.duration
                    if t is direct:
                        base = stats
                    entry = per_target.setdefault(f"{t.name}/{mode}", {})
                    for q in (50, 95, 99):
                        entry.setdefault(f"added_p{q}_ms", []).append(stats[q] - base[q])
                        entry.setdefault(f"p{q}_ms", []).append(stats[q])
                    entry.setdefault("rps", []).append(served)
                    entry.setdefault("errors", []).append(len(samples) - len(ok))
                    lag = pct([s["lag"] for s in samples], 99) * 1000
                    entry.setdefault("generator_lag_p99_ms", []).append(lag)
        key = f"{rate}/poisson" if poisson else str(rate)  # evenly spaced: the rate alone, as before
        results["rates"][key] = {  # type: ignore[index]
            k: {m: round(statistics.median(v), 3) for m, v in d.items()} for k, d in per_target.items()
        }
        print_rate(rate, results["rates"][key], arrivals)  # type: ignore[index]
    print("\nsustained (closed loop, 64 connections, non-streaming):")
    print(f"{'target':<10} {'RPS':>8} {'CPU s/1k req':>13} {'peak RSS MiB':>13}")
    for t in targets:
        pid = t.process.pid if t.process else 0
        before = cpu_seconds(pid)
        samples = load(t, bodies["plain"], duration=args.duration, rate=None, connections=64)
        ok = sum(s["ok"] for s in samples)
        used = cpu_seconds(pid) - before
        row = {
            "rps": round(ok / args.duration, 1),
            "cpu_s_per_1k": round(used / max(ok, 1) * 1000, 3),
            "peak_rss_mib": round(peak_rss_mib(pid), 1),
            "errors": len(samples) - ok,
        }
        results["max"][t.name] = row  # type: ignore[index]
        print(f"{t.name:<10} {row['rps']:>8} {row['cpu_s_per_1k']:>13} {row['peak_rss_mib']:>13}")
    return results


def print_rate(rate: int, table: dict[str, dict[str, float]], arrivals: str = "even") -> None:
    spacing = "Poisson arrivals" if arrivals == "poisson" else "evenly spaced"
    print(f"\n{rate} RPS offered, {spacing} — added latency vs direct, ms (median over rounds)")
    print(f"{'target/mode':<18} {'p50':>8} {'p95':>8} {'p99':>8} {'served RPS':>11} {'errors':>7}")
    for name, row in table.items():
        print(
            f"{name:<18} {row['added_p50_ms']:>8.3f} {row['added_p95_ms']:>8.3f} {row['added_p99_ms']:>8.3f} "
            f"{row['rps']:>11.1f} {row['errors']:>7.0f}"
        )


if __name__ == "__main__":
    main()
