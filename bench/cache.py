"""Result cache benchmark: a cache hit against a miss served by the edge tier, in the same run,
for the diskcache backend and the Redis backend.

Method
------
For each backend a real gateway is started (``tiergate serve`` as a child process, edge tier
only: SmolLM2-135M on llama.cpp, cloud disabled) on a loopback port; the Redis run gets its
own ``redis-server`` on a loopback port in a temporary folder.  One client (``httpx.Client``,
keep-alive, one request at a time, so latencies are not queueing) then sends:

1. misses: ``--misses`` distinct prompts (``temperature=0``, ``max_tokens=16``), each a cache
   miss that the edge model answers and the gateway stores;
2. hits: ``--hits`` requests cycling over the same prompts, each answered from the cache,
   non-streaming; and ``--hits`` more with ``stream=true`` (replayed as SSE, read to ``[DONE]``).

Two latencies per request:

- server side: the ``gateway`` entry of the ``Server-Timing`` response header, the time from
  the chat service receiving the parsed request to its answer (or first byte) being ready,
  so it includes the cache key, the store read and decoding; the ``cache`` entry is the store
  read alone (for misses, the read that found nothing).
- end to end: wall time in the client from sending the request to reading the whole body,
  on the same machine over loopback (HTTP parsing, Litestar, JSON/SSE framing included).

``--warmup`` requests of each kind are sent first and not counted.  The table shows p50 and
p99 in milliseconds; ``bench/results/cache.json`` keeps them and the settings of the run.
Run: ``.venv/bin/python bench/cache.py`` (the 2-core machine was shared; numbers vary ±20%).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
TIERGATE = str(Path(sys.executable).with_name("tiergate"))
RESULTS = ROOT / "bench" / "results" / "cache.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_redis(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not installed; run scripts/setup.sh")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def start_gateway(folder: Path, cache_toml: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = folder / "tiergate.toml"
    config.write_text(f'data_dir = "{folder / "data"}"\n[cloud]\nenabled = false\n{cache_toml}')
    proc = subprocess.Popen(
        [TIERGATE, "serve", "--config", str(config), "--port", str(port)],
        stdout=(folder / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            tiers = httpx.get(f"{url}/readyz", timeout=2).json()["tiers"]
            if any(t["name"] == "edge" and t["health"] == "ready" for t in tiers):
                return proc, url
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"gateway did not start: {(folder / 'gateway.log').read_text()[-2000:]}")


def timing(headers: httpx.Headers) -> dict[str, float]:
    out = {}
    for entry in headers.get("server-timing", "").split(","):
        name, _, dur = entry.strip().partition(";dur=")
        if dur:
            out[name] = float(dur)
    return out


def one(client: httpx.Client, url: str, prompt: str, stream: bool) -> tuple[str, float, dict[str, float]]:
    body = {
        "model": "tiergate-auto",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 16,
        "temperature": 0,
        "stream": stream,
    }
    started = time.perf_counter()
    with client.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
        resp.read()
    elapsed_ms = (time.perf_counter() - started) * 1000
    if resp.status_code != 200:
        raise SystemExit(f"request failed: {resp.status_code} {resp.text}")
    return resp.headers["x-tiergate-cache"], elapsed_ms, timing(resp.headers)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(rows: list[tuple[str, float, dict[str, float]]], expect: str) -> dict[str, Any]:
    assert all(r[0] == expect for r in rows), f"expected every request to be a {expect}"
    e2e = [r[1] for r in rows]
    server = [r[2]["gateway"] for r in rows]
    store = [r[2]["cache"] for r in rows]
    return {
        "n": len(rows),
        "server_p50_ms": pct(server, 0.5),
        "server_p99_ms": pct(server, 0.99),
        "store_read_p50_ms": pct(store, 0.5),
        "store_read_p99_ms": pct(store, 0.99),
        "e2e_p50_ms": pct(e2e, 0.5),
        "e2e_p99_ms": pct(e2e, 0.99),
    }


def run_backend(name: str, cache_toml: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    proc, url = start_gateway(folder, cache_toml)
    try:
        with httpx.Client(timeout=120) as client:
            for i in range(args.warmup):  # model and connection warm-up, then cache warm-up
                one(client, url, f"Warm-up {i}: name a colour.", False)
                one(client, url, f"Warm-up {i}: name a colour.", False)
            prompts = [
                f"Question {i}: name a fruit that is {i % 7} letters long." for i in range(args.misses)
            ]
            misses = [one(client, url, p, False) for p in prompts]
            hits = [one(client, url, prompts[i % len(prompts)], False) for i in range(args.hits)]
            stream_hits = [one(client, url, prompts[i % len(prompts)], True) for i in range(args.hits)]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    return {
        "miss (edge tier)": summary(misses, "miss"),
        "hit": summary(hits, "hit"),
        "hit, streamed": summary(stream_hits, "hit"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--misses", type=int, default=30)
    parser.add_argument("--hits", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backends", default="disk,redis")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tiergate-bench-") as tmp:
        for backend in args.backends.split(","):
            folder = Path(tmp) / backend
            folder.mkdir()
            if backend == "redis":
                redis, redis_url = start_redis(folder)
                try:
                    toml = f'[cache]\nbackend = "redis"\nredis_url = "{redis_url}"\n'
                    results[backend] = run_backend(backend, toml, folder, args)
                finally:
                    redis.terminate()
                    redis.wait(10)
            else:
                results[backend] = run_backend(backend, "", folder, args)

    header = (
        f"{'backend':8} {'kind':18} {'n':>5} {'server p50':>11} {'p99':>8} "
        f"{'store p50':>10} {'e2e p50':>9} {'p99':>8}"
    )
    print(header)
    print("-" * len(header))
    for backend, kinds in results.items():
        for kind, s in kinds.items():
            print(
                f"{backend:8} {kind:18} {s['n']:>5} {s['server_p50_ms']:>11.3f} {s['server_p99_ms']:>8.3f} "
                f"{s['store_read_p50_ms']:>10.3f} {s['e2e_p50_ms']:>9.3f} {s['e2e_p99_ms']:>8.3f}"
            )
    print("(milliseconds; server = Server-Timing gateway;dur, store = cache;dur, e2e = client wall time)")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
                "args": vars(args),
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
