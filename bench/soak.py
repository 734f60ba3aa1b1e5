"""Soak: a steady mixed load for a while, the gateway's memory sampled; is it flat, and only designed errors?

Method
------
* One fast OpenAI stand-in (``bench/upstream.py``) as the cloud pool; the real edge model in-process;
  the result cache on (diskcache); auth, limits, ledger and admission as shipped.
* Four load generators (``bench/loadgen.py``, open loop) at fixed rates for ``--minutes``: cloud
  non-streaming, cloud streaming, repeated deterministic requests (cache hits), and edge requests
  (a few per second, the model is slow).
* The gateway's RSS (with its children: the ledger writer) is sampled every ``--every`` seconds.
  Growth = last sample against the first sample after ``--warmup`` seconds. Target: ≤ 5%, and no
  status other than 200 and the designed 429.

    .venv/bin/python -m bench.soak [--minutes 10] [--rate 200]

Prints a table and writes bench/results/soak.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.overhead import children, free_port, wait_for_file

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "soak.json"


def rss_mib(pid: int) -> float:
    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=200.0, help="cloud requests/s (plain + stream)")
    parser.add_argument("--warmup", type=float, default=60.0)
    parser.add_argument("--every", type=float, default=10.0)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-soak-"))
    upstream_port, port = free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, "bench/upstream.py", str(upstream_port)], cwd=ROOT)
    gateway = subprocess.Popen(
        [str(Path(sys.executable).with_name("tiergate")), "serve", "--port", str(port)],
        cwd=ROOT,
        env={
            **os.environ,
            "TIERGATE_CLOUD__URLS": f"http://127.0.0.1:{upstream_port}",
            "TIERGATE_DATA_DIR": str(tmp / "data"),
            "TIERGATE_SERVER__LOG_LEVEL": "warning",
        },
        stdout=(tmp / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    loads: list[subprocess.Popen[str]] = []
    try:
        credentials = tmp / "data" / "initial-credentials.json"
        wait_for_file(credentials)
        key = json.loads(credentials.read_text())["tenant_key"]
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz").json()["ready"]:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        hello = [{"role": "user", "content": "Say hello."}]
        mixes = {
            "cloud": (
                {"model": "cloud", "messages": hello, "max_tokens": 16, "temperature": 0.7},
                args.rate * 0.6,
            ),
            "cloud-stream": (
                {"model": "cloud", "messages": hello, "max_tokens": 16, "temperature": 0.7, "stream": True},
                args.rate * 0.4,
            ),
            "cache-hit": ({"model": "cloud", "messages": hello, "max_tokens": 16, "temperature": 0}, 20.0),
            "edge": ({"model": "edge", "messages": hello, "max_tokens": 8}, 2.0),
        }
        seconds = args.minutes * 60
        for name, (body, rate) in mixes.items():
            body_file = tmp / f"{name}.json"
            body_file.write_text(json.dumps(body))
            loads.append(
                subprocess.Popen(
                    [
                        *("taskset", "-c", "1"),
                        sys.executable,
                        "-m",
                        "bench.loadgen",
                        url,
                        str(body_file),
                        *("--rate", str(rate), "--duration", str(seconds)),
                        *("-H", f"Authorization: Bearer {key}"),
                    ],
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        samples: list[tuple[float, float]] = []
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            samples.append((round(time.monotonic() - started, 1), round(rss_mib(gateway.pid), 1)))
            time.sleep(args.every)
        statuses: dict[str, collections.Counter[str]] = {}
        for name, proc in zip(mixes, loads, strict=True):
            out, _ = proc.communicate(timeout=120)
            statuses[name] = collections.Counter(json.loads(out.strip().splitlines()[-1])["statuses"])
    finally:
        for proc in loads:
            if proc.poll() is None:
                proc.kill()
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(30)
        upstream.kill()
    after_warmup = [rss for t, rss in samples if t >= args.warmup] or [rss for _, rss in samples]
    growth = (after_warmup[-1] - after_warmup[0]) / after_warmup[0]
    unexpected = {
        n: {s: c for s, c in counts.items() if s not in ("200", "429")} for n, counts in statuses.items()
    }
    print(f"{'load':<14} {'requests':>9} {'200':>9} {'429':>6} {'other':>6}")
    for name, counts in statuses.items():
        print(
            f"{name:<14} {sum(counts.values()):>9} {counts['200']:>9} {counts['429']:>6} "
            f"{sum(unexpected[name].values()):>6}"
        )
    print(
        f"RSS after warm-up: {after_warmup[0]} MiB → {after_warmup[-1]} MiB ({growth:+.1%}); peak "
        f"{max(r for _, r in samples)} MiB"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "method": __doc__,
                "args": vars(args),
                "rss_samples_mib": samples,
                "growth_after_warmup": growth,
                "statuses": {n: dict(c) for n, c in statuses.items()},
                "unexpected_statuses": unexpected,
            },
            indent=2,
        )
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
