"""How long the default ``tiergate serve`` takes until ``/readyz`` shows the edge, then the local vLLM
server's cloud tier, ready: the figure the README gives for the cloud tier's join.

Method: ``--repeats`` times, a fresh ``tiergate serve`` with the default configuration (the edge in
process, the cloud a local vLLM server the gateway starts) on a fresh data folder, timed from the
process start; ``/readyz`` is read every 0.5 s from loopback (which sees each tier's health). The
load average before and after each run is printed beside it: vLLM's start-up (loading the model,
sizing the KV cache) is CPU-bound, so other work on the same cores lengthens it, and a figure is
only comparable with the machine's load said.

    python -m bench.cloud_join --repeats 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from tests.conftest import TIERGATE, free_port


def join_seconds(timeout_s: float) -> dict[str, float]:
    """Seconds from the process start to each tier's first ``ready`` on ``/readyz``."""
    with tempfile.TemporaryDirectory(prefix="tiergate-join-") as tmp:
        config = Path(tmp) / "tiergate.toml"
        config.write_text(f'data_dir = "{tmp}/data"\n')
        port = free_port()
        started = time.monotonic()
        process = subprocess.Popen(
            [TIERGATE, "serve", "--config", str(config), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        ready: dict[str, float] = {}
        try:
            while "cloud" not in ready and time.monotonic() - started < timeout_s:
                if process.poll() is not None:
                    raise SystemExit(f"the gateway exited with {process.returncode}")
                try:
                    tiers = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).json().get("tiers", [])
                except httpx.HTTPError:
                    tiers = []
                for tier in tiers:
                    if tier["health"] == "ready":
                        ready.setdefault(tier["name"], round(time.monotonic() - started, 1))
                time.sleep(0.5)
        finally:
            process.terminate()
            process.wait(60)
        return ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the cloud tier")
    args = parser.parse_args()
    print(f"{'run':>3} {'edge s':>7} {'cloud s':>8}  load average before → after ({os.cpu_count()} cores)")
    for run in range(1, args.repeats + 1):
        before = os.getloadavg()[0]
        ready = join_seconds(args.timeout)
        after = os.getloadavg()[0]
        edge, cloud = ready.get("edge", float("nan")), ready.get("cloud", float("nan"))
        print(f"{run:>3} {edge:>7.1f} {cloud:>8.1f}  {before:.1f} → {after:.1f}")


if __name__ == "__main__":
    main()
