"""How long ``tiergate serve`` takes to answer ``/healthz``, against a baseline checkout.

Method: one fake cloud (tests/fakes.py) on loopback; ``--repeats`` times, a gateway from this tree,
then one from ``--baseline`` (another checkout, e.g. ``git worktree add /tmp/base <commit>``), each a
fresh ``tiergate serve`` on a fresh data folder with the edge tier off (the edge model's load is not
what is measured), started with its tree first on ``PYTHONPATH``, timed from the process start to the
first 200 from ``/healthz``, then stopped. The two alternate so that a busy machine slows both alike.
The first start of this tree is left out of the median (it fills the build cache's built-in difficulty
model, as the first start on a machine does). Medians are printed with their ratio and written to
``bench/results/gateway_start.json``.

    python -m bench.gateway_start --baseline /tmp/base --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.conftest import TIERGATE, free_port
from tests.fakes import FakeVLLM

RESULTS = Path(__file__).parent / "results" / "gateway_start.json"


def start_seconds(tree: Path, cloud_url: str) -> float:
    with tempfile.TemporaryDirectory(prefix="tiergate-start-") as tmp:
        config = Path(tmp) / "tiergate.toml"
        config.write_text(
            f'data_dir = "{tmp}/data"\n[edge]\nenabled = false\n[cloud]\nurls = ["{cloud_url}"]\n'
        )
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(tree)}
        started = time.monotonic()
        process = subprocess.Popen(
            [TIERGATE, "serve", "--config", str(config), "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            while True:
                if process.poll() is not None:
                    raise SystemExit(f"the gateway from {tree} exited with {process.returncode}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                        return time.monotonic() - started
                except httpx.HTTPError:
                    pass
                time.sleep(0.05)
        finally:
            process.terminate()
            process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout to compare with")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    here = Path(__file__).resolve().parents[1]
    times: dict[str, list[float]] = {"this": [], "baseline": []}
    with FakeVLLM() as fake:
        start_seconds(here, fake.url)  # fills the build cache, as a machine's first start does
        for _ in range(args.repeats):
            times["this"].append(start_seconds(here, fake.url))
            times["baseline"].append(start_seconds(args.baseline.resolve(), fake.url))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{'tree':<10} {'median s':>9}  runs")
    for name, values in times.items():
        print(f"{name:<10} {medians[name]:>9.2f}  {', '.join(f'{v:.2f}' for v in values)}")
    ratio = medians["this"] / medians["baseline"]
    print(f"this / baseline: {ratio:.2f}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"method": "see bench/gateway_start.py", "cpus": os.cpu_count(), "seconds": times}
            | {"median_s": medians, "ratio": round(ratio, 3), "load_average": os.getloadavg()},
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
