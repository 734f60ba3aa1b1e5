"""What observability costs: gateway throughput with metrics and logging on vs off, same run.

Starts a fast fake upstream (the OpenAI-shaped aiohttp server of ``bench/ledger.py``, answering at
once) and three gateways in front of it (``tiergate serve``, edge tier off, cloud = the fake, result
cache off so every request goes through routing, admission and the upstream), identical but for
``[observability]``:

* ``off``: ``metrics = false`` (every family a no-op, no request middleware), ``log_format = "text"``;
* ``default``: the shipped defaults: every metric family recorded, JSON logs (no line per request);
* ``all on``: the defaults plus ``request_log = true`` (one JSON log line per request, written to
  the gateway's log file) and /metrics scraped every second during the load.

Each round loads the three in turn (the order alternates) for ``--seconds`` at ``--concurrency``
clients that authenticate with a tenant key; the table shows medians over ``--rounds``: requests per
second, latency, and the gateway's CPU time per request (read from /proc: the gateway's process and
its children), whose difference is what metrics and logging cost each request.

Two measurements without the network follow, since on a shared 2-core machine the HTTP figures
swing by more than the effect: the same three configurations' apps called in this process as ASGI
callables in front of an instant in-process tier (median CPU time per request over interleaved
rounds, ledger off), and the metric calls one proxied request makes, timed alone.  With ``taskset``
the gateways share CPU 0 and the upstream and the load generator CPU 1.  Results go to
``bench/results/metrics_overhead.json``.

    flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.metrics_overhead [--seconds 5] [--rounds 5]
        [--concurrency 32] [--stream]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench._asgi_ab import measure
from bench.ledger import GatewayProcess, free_port, load, pinned

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {
    "off": 'metrics = false\nlog_format = "text"\n',
    "default": "",
    "all on": "request_log = true\n",
}
SCRAPED = {"all on"}


async def scrape_every(session: aiohttp.ClientSession, gw: GatewayProcess, interval: float) -> int:
    scrapes = 0
    while True:
        async with session.get(f"{gw.url}/metrics") as resp:
            await resp.read()
        scrapes += 1
        await asyncio.sleep(interval)


async def one_round(
    session: aiohttp.ClientSession, name: str, gw: GatewayProcess, args: argparse.Namespace
) -> dict[str, Any]:
    scraper = asyncio.create_task(scrape_every(session, gw, 1.0)) if name in SCRAPED else None
    cpu = gw.cpu_s()
    try:
        result = await load(session, gw, args.seconds, args.concurrency, args.stream)  # type: ignore[arg-type]
    finally:
        if scraper is not None:
            scraper.cancel()
    result["cpu_us_per_request"] = 1e6 * (gw.cpu_s() - cpu) / max(result["requests"], 1)
    return result


async def main(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    upstream = await asyncio.create_subprocess_exec(
        *pinned(1),
        sys.executable,
        "-c",
        f"from bench.ledger import serve_upstream; serve_upstream({port})",
        cwd=ROOT,
    )
    workdir = Path(tempfile.mkdtemp(prefix="tiergate-bench-obs-"))
    url = f"http://127.0.0.1:{port}"
    gateways = {
        name: GatewayProcess(
            workdir / name.replace(" ", "-"), url, f"[cache]\nenabled = false\n[observability]\n{obs}"
        )
        for name, obs in VARIANTS.items()
    }
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in gateways}
    log_lines: dict[str, int] = {}
    try:
        connector = aiohttp.TCPConnector(limit=args.concurrency * 2)
        async with aiohttp.ClientSession(connector=connector) as session:
            for gw in gateways.values():
                await gw.ready(session)
            for gw in gateways.values():  # warm up
                await load(session, gw, 1.0, args.concurrency, args.stream)  # type: ignore[arg-type]
            for i in range(args.rounds):
                order = list(gateways) if i % 2 == 0 else list(reversed(gateways))
                for name in order:
                    result = await one_round(session, name, gateways[name], args)
                    rounds[name].append(result)
                    print(
                        f"round {i + 1} {name:>8}: {result['rps']:7.0f} req/s "
                        f"{result['cpu_us_per_request']:6.0f} CPU us/req",
                        file=sys.stderr,
                    )
        for name, gw in gateways.items():
            log_lines[name] = sum(1 for _ in gw.log_path.open("rb"))
    finally:
        for gw in gateways.values():
            gw.stop()
        upstream.terminate()
        await upstream.wait()
        shutil.rmtree(workdir, ignore_errors=True)

    summary: dict[str, dict[str, Any]] = {}
    for name, results in rounds.items():
        summary[name] = {
            "rps": statistics.median(r["rps"] for r in results),
            "p50_ms": statistics.median(r["p50_ms"] for r in results),
            "p99_ms": statistics.median(r["p99_ms"] for r in results),
            "cpu_us_per_request": statistics.median(r["cpu_us_per_request"] for r in results),
            "requests": sum(r["requests"] for r in results),
            "errors": sum(r["errors"] for r in results),
            "log_lines": log_lines.get(name, 0),
            "rounds": results,
        }
    off = summary["off"]
    for r in summary.values():
        r["throughput_cost"] = 1 - r["rps"] / off["rps"]
        r["cpu_us_added_per_request"] = r["cpu_us_per_request"] - off["cpu_us_per_request"]
        # the same, as the median of per-round differences (rounds are back to back, so the machine's
        # other load affects both sides of each difference alike)
        r["cpu_us_added_per_request_paired"] = statistics.median(
            a["cpu_us_per_request"] - b["cpu_us_per_request"]
            for a, b in zip(r["rounds"], off["rounds"], strict=True)
        )
    return {
        "what": "gateway throughput with metrics and logging on vs off, same run, fake upstream, cache off",
        "stream": args.stream,
        "concurrency": args.concurrency,
        "seconds_per_round": args.seconds,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "pinned": bool(pinned(0)),
        "target": "< 5% throughput",
        "variants": VARIANTS,
        "results": summary,
        "in_process_us": in_process_cost(),
    }


def table(report: dict[str, Any]) -> str:
    head = ["", "req/s", "cost", "p50 ms", "p99 ms", "CPU us/req", "added", "errors"]
    lines = [f"{head[0]:>8} " + " ".join(f"{h:>10}" for h in head[1:])]
    for name, r in report["results"].items():
        cells = [
            f"{r['rps']:.0f}",
            f"{100 * r['throughput_cost']:.1f}%",
            f"{r['p50_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['cpu_us_per_request']:.0f}",
            f"{r['cpu_us_added_per_request_paired']:+.0f}",
            str(r["errors"]),
        ]
        lines.append(f"{name:>8} " + " ".join(f"{c:>10}" for c in cells))
    lines.append("cost: throughput lost vs off; added: gateway CPU us per request vs off (median of rounds)")
    asgi = report["asgi_cpu_us_per_request"]
    lines.append(
        "the app called in process (no network, instant tier, ledger off), CPU us per request: "
        + ", ".join(f"{name} {us:.0f}" for name, us in asgi.items())
    )
    micro = report["in_process_us"]
    lines.append(
        f"in process, per request: metric calls {micro['metrics']:.1f} us, "
        f"one JSON request log line {micro['json_log_line']:.1f} us (best of 5 x 20,000)"
    )
    return "\n".join(lines)


def in_process_cost() -> dict[str, float]:
    """The calls one proxied request makes into the metrics, and one request log line, timed in
    this process (no network, no other processes in the figure)."""
    import io
    import logging

    from gateway.ops.logs import REQUEST_ID, handler
    from gateway.ops.metrics import Metrics
    from gateway.ops.tracing import Tracing

    m, tracing = Metrics(), Tracing()
    logger = logging.getLogger("bench.request")
    logger.handlers[:] = [handler("json", io.StringIO())]
    logger.propagate = False
    logger.setLevel(logging.INFO)

    # bound once, as the admission gate and the result cache bind theirs
    wait, bypass = m.child(m.queue_wait, "cloud", "fast"), m.cache_requests.labels("bypass")

    def metrics() -> None:
        token = REQUEST_ID.set("0123456789abcdef0123456789abcdef")
        for stage in ("auth", "rate_limit", "cache.lookup", "route", "tier.cloud", "ledger.write"):
            with tracing.span(stage):
                pass
        bypass.inc()
        m.route_decided("pinned", "cloud", "pinned")
        wait.observe(0.0)
        m.tier("cloud").latency.observe(0.002)
        m.generated("cloud", 2, 0.002)
        m.ledger_written(0.0004)
        m.request_done("/v1/chat/completions", "standard", "cloud", "cloud", 200, 0.003)
        REQUEST_ID.reset(token)

    def log_line() -> None:
        extra = {"route": "/v1/chat/completions", "status": 200, "tier": "cloud", "ms": 3.1}
        logger.info("%s %s %d", "POST", "/v1/chat/completions", 200, extra=extra)

    out = {}
    for name, fn in (("metrics", metrics), ("json_log_line", log_line)):
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(20_000):
                fn()
            samples.append((time.perf_counter() - started) / 20_000 * 1e6)
        out[name] = min(samples)  # the least disturbed of the repeats: this machine is shared
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "metrics_overhead.json")
    args = parser.parse_args()
    report = asyncio.run(main(args))
    # the gateway's own CPU per request, the app called as an ASGI callable (no network)
    report["asgi_cpu_us_per_request"] = measure(VARIANTS)
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    existing = json.loads(args.out.read_text()) if args.out.exists() else {}
    existing["stream" if args.stream else "json"] = report
    args.out.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"wrote {args.out}")
