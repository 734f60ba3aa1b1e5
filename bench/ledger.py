"""What the ledger costs: gateway throughput and latency with the ledger on vs off, same run.

Starts a fast fake upstream (an OpenAI-shaped aiohttp server answering at once) and two
gateways in front of it (``tiergate serve``, edge tier off, cloud = the fake), identical
but for ``ledger.enabled``; both authenticate every request with a tenant key. Then it
loads them in alternating rounds at a fixed concurrency and prints a table; the results
go to ``bench/results/ledger.json``.  With ``taskset`` available the gateways share CPU 0
and the upstream and the load generator CPU 1, so they do not steal each other's core.

    .venv/bin/python bench/ledger.py [--seconds 5] [--rounds 5] [--concurrency 64] [--stream]
                                        [--writer thread]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
TIERGATE = str(Path(sys.executable).with_name("tiergate"))
ANSWER = {
    "model": "fake",
    "choices": [{"message": {"content": "fake answer"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_upstream(port: int) -> None:
    """The fake upstream (run in a child process)."""
    chunk = {"id": "x", "object": "chat.completion.chunk", "model": "fake"}

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response(ANSWER)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for delta, finish in (({"content": "fake answer"}, None), ({}, "stop")):
            event = {**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        usage = {**chunk, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
        await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake"}]})

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def pinned(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []


class GatewayProcess:
    """A gateway on its own port and data folder, the fake upstream as its cloud, pinned to core 0;
    ``config`` is appended to its tiergate.toml."""

    def __init__(self, workdir: Path, upstream: str, config: str = "") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data = workdir / "data"
        path = workdir / "tiergate.toml"
        workdir.mkdir(parents=True)
        path.write_text(
            f'data_dir = "{self.data}"\n[edge]\nenabled = false\n'
            f'[cloud]\nurls = ["{upstream}"]\nhealth_interval_s = 0.5\n{config}'
        )
        self.log_path = workdir / "gateway.log"
        self.process = subprocess.Popen(
            [*pinned(0), TIERGATE, "serve", "--config", str(path), "--port", str(self.port)],
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.key = ""

    async def ready(self, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                async with session.get(f"{self.url}/readyz") as resp:
                    if resp.status == 200:
                        creds = json.loads((self.data / "initial-credentials.json").read_text())
                        self.key = creds["tenant_key"]
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError(
            f"gateway on {self.url} did not become ready:\n{self.log_path.read_text()[-2000:]}"
        )

    def cpu_s(self) -> float:
        """CPU time used so far by the gateway process (all its threads) and its children (the
        ledger's write-ahead writer)."""
        pids = {self.process.pid}
        for task in Path(f"/proc/{self.process.pid}/task").glob("*"):
            pids.update(int(p) for p in (task / "children").read_text().split())
        total = 0
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


async def load(
    session: aiohttp.ClientSession, gw: GatewayProcess, seconds: float, concurrency: int, stream: bool
) -> dict[str, Any]:
    body = json.dumps(
        {"model": "cloud", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": stream}
    ).encode()
    headers = {"Authorization": f"Bearer {gw.key}", "Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            async with session.post(f"{gw.url}/v1/chat/completions", data=body, headers=headers) as resp:
                await resp.read()
                if resp.status != 200:
                    errors += 1
                    continue
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "requests": len(latencies),
        "errors": errors,
        "rps": len(latencies) / elapsed,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[int(0.99 * (len(latencies) - 1))],
    }


def ledger_rows(gw: GatewayProcess) -> int:
    import sqlite3

    with sqlite3.connect(gw.data / "tiergate.db") as db:
        return int(db.execute("select count(*) from ledger").fetchone()[0])


async def main(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    upstream = await asyncio.create_subprocess_exec(
        *pinned(1), sys.executable, __file__, "--upstream", str(port)
    )
    workdir = Path(tempfile.mkdtemp(prefix="tiergate-bench-ledger-"))
    gateways = {
        "ledger on": GatewayProcess(
            workdir / "on",
            f"http://127.0.0.1:{port}",
            f"[ledger]\nenabled = true\nwriter_process = {str(args.writer == 'process').lower()}\n",
        ),
        "ledger off": GatewayProcess(
            workdir / "off", f"http://127.0.0.1:{port}", "[ledger]\nenabled = false\n"
        ),
    }
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in gateways}
    warm_up: dict[str, dict[str, Any]] = {}
    try:
        connector = aiohttp.TCPConnector(limit=args.concurrency * 2)
        async with aiohttp.ClientSession(connector=connector) as session:
            for gw in gateways.values():
                await gw.ready(session)
            for name, gw in gateways.items():
                warm_up[name] = await load(session, gw, 1.0, args.concurrency, args.stream)
            for i in range(args.rounds):
                order = list(gateways) if i % 2 == 0 else list(reversed(gateways))
                for name in order:
                    cpu = gateways[name].cpu_s()
                    result = await load(session, gateways[name], args.seconds, args.concurrency, args.stream)
                    result["cpu_us_per_request"] = 1e6 * (gateways[name].cpu_s() - cpu) / result["requests"]
                    rounds[name].append(result)
                    print(f"round {i + 1} {name:>10}: {result['rps']:8.0f} req/s", file=sys.stderr)
        await asyncio.sleep(1.0)  # let the loader move the last rows into the database
        rows = ledger_rows(gateways["ledger on"])
    finally:
        for gw in gateways.values():
            gw.stop()
        upstream.terminate()
        await upstream.wait()
        shutil.rmtree(workdir, ignore_errors=True)

    summary = {}
    for name, results in rounds.items():
        summary[name] = {
            "rps": statistics.median(r["rps"] for r in results),
            "p50_ms": statistics.median(r["p50_ms"] for r in results),
            "p99_ms": statistics.median(r["p99_ms"] for r in results),
            "cpu_us_per_request": statistics.median(r["cpu_us_per_request"] for r in results),
            "requests": sum(r["requests"] for r in results),
            "errors": sum(r["errors"] for r in results),
            "rounds": results,
        }
    on, off = summary["ledger on"], summary["ledger off"]
    cost = 1 - on["rps"] / off["rps"]
    cpu_cost = on["cpu_us_per_request"] / off["cpu_us_per_request"] - 1
    return {
        "what": "gateway throughput with the ledger on vs off, same run, fake upstream",
        "stream": args.stream,
        "ledger_writer": args.writer,
        "concurrency": args.concurrency,
        "seconds_per_round": args.seconds,
        "rounds": args.rounds,
        "cpus": os.cpu_count(),
        "pinned": bool(pinned(0)),
        "throughput_cost": cost,
        "cpu_per_request_cost": cpu_cost,
        "target": "< 5%",
        "ledger_rows_written": rows,
        # every request answered 200 by the ledger-on gateway, warm-up included: should equal the rows
        "requests_answered_with_ledger": on["requests"] + warm_up["ledger on"]["requests"],
        "results": summary,
    }


def table(report: dict[str, Any]) -> str:
    lines = [f"{'':>12} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU us/req':>11} {'errors':>7}"]
    for name, r in report["results"].items():
        lines.append(
            f"{name:>12} {r['rps']:9.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} "
            f"{r['cpu_us_per_request']:11.0f} {r['errors']:7d}"
        )
    lines.append(f"throughput cost of the ledger: {100 * report['throughput_cost']:.1f}% (target < 5%)")
    lines.append(f"gateway CPU per request, ledger on vs off: {100 * report['cpu_per_request_cost']:+.1f}%")
    lines.append(
        f"ledger rows in the database: {report['ledger_rows_written']} "
        f"for {report['requests_answered_with_ledger']} requests answered 200"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--stream", action="store_true")
    parser.add_argument(
        "--writer", choices=("process", "thread"), default="process", help="ledger.writer_process on or off"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "ledger.json")
    args = parser.parse_args()
    if args.upstream:
        serve_upstream(args.upstream)
        sys.exit(0)
    report = asyncio.run(main(args))
    print(table(report))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    key = ("stream" if args.stream else "json") + ("" if args.writer == "process" else "-thread-writer")
    existing = json.loads(args.out.read_text()) if args.out.exists() else {}
    existing[key] = report
    args.out.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"wrote {args.out}")
