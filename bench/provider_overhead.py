"""What a provider-tier call costs the gateway, against a vLLM-pool call, in the same run.

Method
------
* One gateway process (``tiergate serve``, pinned with ``taskset`` to core 0; edge off, result cache
  off, the learner's background refit held as in ``bench/cpu_per_request.py``) with three tiers, each
  pinned by its name in ``model`` (no routing choice):
  - ``cloud``: the vLLM-pool kind, its hand-written HTTP/1.1 client (``tiers/cloud/_http.py``, on
    httptools) to ``bench/upstream.py`` over plain HTTP on loopback, as ``bench/overhead.py`` does;
  - ``gpt``: ``kind = "provider"``, ``protocol = "openai"``, through the provider tier's httpx client
    over TLS (certificate verified against a ``trustme`` test CA, ``ca_file``) with HTTP/2, which the
    upstream offers by ALPN;
  - ``gpt-h1``: the same with ``http2 = false`` (HTTP/1.1 keep-alive over TLS).
  Both provider tiers call ``bench/upstream_tls.py``: the same canned answers as ``bench/upstream.py``
  (a fixed completion, or a 4-chunk SSE stream with usage), over TLS, HTTP/2 or HTTP/1.1 by ALPN.
  The two upstreams and the load generator (``bench/loadgen.py``, in this process) share core 1.
* Load: open loop, Poisson arrivals at ``--rate`` requests/s (the same seeded gaps for every target)
  for ``--duration`` s per run, over plain HTTP/1.1 keep-alive from the load generator.  Targets:
  ``direct`` (the plain upstream itself, the floor), then the gateway's ``cloud``, ``gpt``,
  ``gpt-h1``, in rounds (``--repeats``), each round a JSON run and a streamed run per target.
  Each gateway target first gets ``--warmup`` s of load per mode, not measured (connections open,
  the TLS handshake, first refits).
* Per run: the gateway process's CPU time (utime + stime of it and its children from ``/proc``,
  ``bench.overhead.cpu_seconds``), read before and 0.3 s after the last answer (so the ledger's
  deferred writes count), divided by the requests answered: CPU µs per request.  Latency: to the
  last byte for JSON, to the first body byte for streams; *added* = the target's percentile minus
  ``direct``'s in the same round and mode.  The provider's *added* includes the TLS hop (the
  gateway's encryption and the upstream's), which a direct call over plain HTTP does not pay.  The
  table gives the median over rounds.
* ``alpn``: the protocols the TLS upstream agreed per connection (its log), to show HTTP/2 was used
  where offered.

    PYTHONPATH=$PWD flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.provider_overhead \\
        [--rate 100] [--duration 5] [--repeats 5]

Prints a table and writes bench/results/provider_overhead.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.overhead import LOAD_CORE, SERVER_CORE, cpu_seconds, free_port, pct, start, wait_for_file

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "provider_overhead.json"
KEY_ENV = "BENCH_PROVIDER_KEY"  # not TIERGATE_*: those are read as settings
TARGETS = ("direct", "cloud", "gpt", "gpt-h1")
MESSAGES = [{"role": "user", "content": "Say hello."}]


def gateway_config(data: Path, plain_port: int, tls_port: int, ca_file: Path) -> str:
    provider = (
        'kind = "provider"\nprotocol = "openai"\n'
        f'base_url = "https://127.0.0.1:{tls_port}/v1"\nmodel = "bench"\n'
        f'api_key_env = "{KEY_ENV}"\nca_file = "{ca_file}"\n'
    )
    return (
        f'data_dir = "{data}"\n[server]\nlog_level = "warning"\n[cache]\nenabled = false\n'
        f'[edge]\nenabled = false\n[cloud]\nurls = ["http://127.0.0.1:{plain_port}"]\n'
        "[router.predictor]\nrefit_interval_s = 1e9\n"
        f"[tiers.gpt]\n{provider}[tiers.gpt-h1]\n{provider}http2 = false\n"
    )


def body(model: str, stream: bool) -> bytes:
    return json.dumps({"model": model, "messages": MESSAGES, "max_tokens": 16, "stream": stream}).encode()


def measure(
    url: str, payload: bytes, headers: dict[str, str], args: argparse.Namespace, pid: int | None
) -> dict[str, Any]:
    before = cpu_seconds(pid) if pid else 0.0
    samples, _failed = loadgen.run(
        url, payload, duration=args.duration, rate=args.rate, headers=headers, poisson=True
    )
    time.sleep(0.3)  # deferred work (ledger writes) counts
    used = cpu_seconds(pid) - before if pid else 0.0
    ok = [s for s in samples if s.ok]
    stream = b'"stream": true' in payload
    values = [s.first_byte if stream else s.total for s in ok]
    return {
        "p50_ms": pct(values, 50) * 1000,
        "p99_ms": pct(values, 99) * 1000,
        "answered": len(ok),
        "errors": len(samples) - len(ok),
        "cpu_us_per_request": used / len(ok) * 1e6 if pid and ok else None,
    }


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from tests.standins.tls import TestCA

    ca = TestCA.make(tmp / "ca")
    python = sys.executable
    plain_port, tls_port, port = free_port(), free_port(), free_port()
    os.environ[KEY_ENV] = "sk-bench-" + os.urandom(16).hex()
    tls_log = tmp / "upstream_tls.log"
    procs = [
        start([python, "bench/upstream.py", str(plain_port)], LOAD_CORE),
        start(
            [python, "-m", "bench.upstream_tls", str(tls_port), str(ca.cert_file), str(ca.key_file)],
            LOAD_CORE,
            log=tls_log,
        ),
    ]
    config = tmp / "tiergate.toml"
    config.write_text(gateway_config(tmp / "data", plain_port, tls_port, ca.ca_file))
    tiergate = str(Path(python).with_name("tiergate"))
    gateway = start(
        [tiergate, "serve", "--config", str(config), "--port", str(port)], SERVER_CORE, log=tmp / "gw.log"
    )
    procs.append(gateway)
    try:
        wait_for_file(tmp / "data" / "initial-credentials.json", timeout=120)
        key = json.loads((tmp / "data" / "initial-credentials.json").read_text())["tenant_key"]
        time.sleep(3)  # the server binds after the credentials are written
        direct = f"http://127.0.0.1:{plain_port}/v1/chat/completions"
        through = f"http://127.0.0.1:{port}/v1/chat/completions"
        auth = {"Authorization": f"Bearer {key}"}
        for name in TARGETS[1:]:
            for stream in (False, True):
                loadgen.run(through, body(name, stream), duration=args.warmup, rate=args.rate, headers=auth)
        runs: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        for round_ in range(args.repeats):
            for stream in (False, True):
                mode = "stream" if stream else "json"
                base = measure(direct, body("bench", stream), {}, args, None)
                runs[f"direct/{mode}"].append(base)
                for name in TARGETS[1:]:
                    row = measure(through, body(name, stream), auth, args, gateway.pid)
                    row["added_p50_ms"] = row["p50_ms"] - base["p50_ms"]
                    row["added_p99_ms"] = row["p99_ms"] - base["p99_ms"]
                    runs[f"{name}/{mode}"].append(row)
            print(f"round {round_ + 1}/{args.repeats} done, load {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(15)
    alpn = collections.Counter(tls_log.read_text().split()) if tls_log.exists() else {}
    summary = {
        key: {
            field: round(statistics.median(v), 3)
            for field in rows[0]
            if (v := [r[field] for r in rows if r[field] is not None])
        }
        for key, rows in runs.items()
    }
    return {"summary": summary, "runs": runs, "alpn": dict(alpn)}


def table(summary: dict[str, dict[str, float]]) -> str:
    lines = [
        "| target/mode | gateway CPU µs/request | p50 ms | p99 ms | added p50 ms | added p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, row in summary.items():
        cells = [
            row.get(f) for f in ("cpu_us_per_request", "p50_ms", "p99_ms", "added_p50_ms", "added_p99_ms")
        ]
        text = ["—" if c is None else f"{c:.0f}" if i == 0 else f"{c:.2f}" for i, c in enumerate(cells)]
        lines.append(f"| {key} | {' | '.join(text)} | {row.get('errors', 0):.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=100.0, help="requests/s, Poisson arrivals")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per run")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds per gateway target and mode")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(LOAD_CORE)})  # the load generator runs beside the upstreams
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-provider-overhead-"))
    load_before = os.getloadavg()
    started = time.monotonic()
    report = run(args, tmp)
    report.update(
        method=__doc__,
        args={k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        seconds=round(time.monotonic() - started, 1),
        load=[list(load_before), list(os.getloadavg())],
    )
    print(table(report["summary"]))
    print(f"TLS connections by ALPN: {report['alpn']}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
