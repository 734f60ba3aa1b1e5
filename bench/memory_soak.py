"""Memory soak: ordinary mixed traffic for a while; does the gateway's RSS stay flat?

Method
------
* One fast OpenAI stand-in (``bench/upstream.py``) as the cloud pool; the real edge model and the real
  embedding model in-process; everything else as shipped: the result cache (diskcache), stored
  Responses, the learner, metrics, the ledger, auth and limits.  Nothing is preloaded or warmed: the
  one-off steps (the embedding model's load, the router's refit worker) happen in the run, as they
  would in production, and are why the fit starts after the first third.
* Requests arrive as a Poisson process at ``--rate`` a second (40 by default), each of a kind drawn by
  the weights in :data:`MIX`: chat JSON and streamed chat with distinct prompts, Responses (stored, the
  default), ``/v1/messages``, embeddings of distinct texts, ``count_tokens``, repeated deterministic
  chat (result-cache hits), a few edge-tier requests, labels through ``POST /v1/feedback``, and a few
  requests the gateway refuses (unknown model, bad field).
* The gateway's RSS (its process and children: the ledger's writer) is read from /proc every
  ``--every`` seconds.  A least-squares line is fitted to the samples after the first third of the
  run; its slope is the growth in MiB an hour (target: < 40), and against the requests answered, in
  MiB per 1,000 requests.
* ``--only KIND`` sends one kind alone (the per-kind retention of docs/reliability.md "Memory bounds").

    .venv/bin/python -m bench.memory_soak [--minutes 30] [--rate 40] [--only chat]

Prints a table and writes bench/results/memory_soak[_KIND].json and, for a mixed run,
docs/img/memory_soak.svg (RSS over time, the fitted line).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.memory_plot import fit, svg
from bench.overhead import free_port, wait_for_file
from bench.soak import rss_mib

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PLOT = ROOT / "docs" / "img" / "memory_soak.svg"
# Share of the requests of each kind.
MIX = {
    "chat": 0.28,
    "chat-stream": 0.18,
    "responses": 0.12,
    "messages": 0.12,
    "embeddings": 0.10,
    "count-tokens": 0.05,
    "cache-hit": 0.08,
    "edge": 0.02,
    "feedback": 0.03,
    "refused": 0.02,
}
# Prompts are drawn from these words (and a serial number), so each is distinct and the quality
# model's word buckets vary as real traffic's do.
VOCABULARY = tuple(
    " ".join(
        (
            "river mountain question answer summary history science garden planet engine kitchen music",
            "library window system network ocean forest market language number theory bridge village",
            "winter summer letter photo paper castle doctor teacher student travel budget energy",
            "weather island desert story recipe circuit protein galaxy harbor lantern meadow orbit",
            "pencil quartz saddle temple violin walnut yogurt zebra anchor blossom canyon dolphin",
        )
    ).split()
)
TASKS = ("Explain", "Summarise", "Compare", "List three facts about", "Write a haiku on", "Define")


class Traffic:
    """Builds each kind's request with a fresh prompt; remembers a few answers' ids for feedback."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        self.answered: collections.deque[str] = collections.deque(maxlen=200)

    def prompt(self) -> str:
        self.n += 1
        words = " ".join(self.rng.choice(VOCABULARY) for _ in range(self.rng.randint(8, 40)))
        return f"{self.rng.choice(TASKS)} {words} (request {self.n})"

    def request(self, kind: str) -> tuple[str, dict[str, Any]]:
        """(path, JSON body) for one request of ``kind``."""
        user = [{"role": "user", "content": self.prompt()}]
        if kind in ("chat", "chat-stream"):
            body = {"model": "cloud", "messages": user, "max_tokens": 16, "temperature": 0.7}
            return "/v1/chat/completions", {**body, "stream": kind == "chat-stream"}
        if kind == "responses":
            return "/v1/responses", {"model": "cloud", "input": self.prompt(), "max_output_tokens": 16}
        if kind == "messages":
            return "/v1/messages", {"model": "cloud", "messages": user, "max_tokens": 16}
        if kind == "count-tokens":
            return "/v1/messages/count_tokens", {"model": "cloud", "messages": user}
        if kind == "embeddings":
            return "/v1/embeddings", {"model": "all-MiniLM-L6-v2", "input": [self.prompt(), self.prompt()]}
        if kind == "cache-hit":
            hello = [{"role": "user", "content": f"Say hello {self.rng.randrange(20)}."}]
            return "/v1/chat/completions", {
                "model": "cloud",
                "messages": hello,
                "max_tokens": 16,
                "temperature": 0,
            }
        if kind == "edge":
            return "/v1/chat/completions", {"model": "edge", "messages": user, "max_tokens": 8}
        if kind == "feedback" and self.answered:
            answer = self.answered[self.rng.randrange(len(self.answered))]
            return "/v1/feedback", {"id": answer, "label": self.rng.choice(("good", "bad"))}
        if self.rng.random() < 0.5 or kind == "feedback":
            return "/v1/chat/completions", {"model": "no-such-model", "messages": user}
        return "/v1/chat/completions", {"model": "cloud", "messages": user, "no_such_field": 1}


class Driver:
    """Poisson arrivals of the mix; the statuses per kind as the requests end."""

    def __init__(self, base: str, key: str, mix: dict[str, float], seed: int) -> None:
        self.traffic = Traffic(seed)
        self.mix = mix
        self.statuses: dict[str, collections.Counter[str]] = {k: collections.Counter() for k in mix}
        headers = {"Authorization": f"Bearer {key}", "x-api-key": key, "anthropic-version": "2023-06-01"}
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        self.client = httpx.AsyncClient(base_url=base, headers=headers, limits=limits, timeout=120)

    def ended(self) -> int:
        return sum(sum(c.values()) for c in self.statuses.values())

    async def one(self, kind: str) -> None:
        path, body = self.traffic.request(kind)
        try:
            if body.get("stream"):
                async with self.client.stream("POST", path, json=body) as resp:
                    async for _ in resp.aiter_bytes():
                        pass
                    status = resp.status_code
            else:
                resp = await self.client.post(path, json=body)
                status = resp.status_code
                if status == 200 and kind in ("chat", "responses"):
                    self.traffic.answered.append(resp.json()["id"])
            self.statuses[kind][str(status)] += 1
        except httpx.HTTPError as exc:
            self.statuses[kind][type(exc).__name__] += 1

    async def run(self, rate: float, seconds: float) -> None:
        tasks: set[asyncio.Task[None]] = set()
        kinds, weights = list(self.mix), list(self.mix.values())
        rng = self.traffic.rng
        start = time.monotonic()
        due = rng.expovariate(rate)
        while due < seconds:
            await asyncio.sleep(max(0.0, start + due - time.monotonic()))
            task = asyncio.create_task(self.one(rng.choices(kinds, weights)[0]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            due += rng.expovariate(rate)
        await asyncio.gather(*tasks)
        await self.client.aclose()


async def soak(
    base: str, key: str, pid: int, args: argparse.Namespace, mix: dict[str, float]
) -> dict[str, Any]:
    """The mix for ``args.minutes``; [seconds, RSS MiB, requests ended] every ``args.every`` seconds."""
    seconds = args.minutes * 60
    driver = Driver(base, key, mix, args.seed)
    traffic = asyncio.create_task(driver.run(args.rate, seconds))
    samples: list[list[float]] = []
    start = time.monotonic()
    censuses = [seconds / 3, seconds - 2 * args.every] if args.census else []
    while (now := time.monotonic() - start) < seconds:
        samples.append([round(now, 1), round(rss_mib(pid), 1), driver.ended()])
        if censuses and now >= censuses[0]:
            censuses.pop(0)
            os.kill(pid, signal.SIGUSR1)
        await asyncio.sleep(args.every - (time.monotonic() - start) % args.every)
    await traffic
    samples.append([round(time.monotonic() - start, 1), round(rss_mib(pid), 1), driver.ended()])
    return {"samples": samples, "statuses": {k: dict(c) for k, c in driver.statuses.items()}}


def start_gateway(
    tmp: Path, upstream_port: int, port: int, env: dict[str, str], code: Path, census: bool
) -> subprocess.Popen[bytes]:
    """``tiergate serve`` with the code in ``code`` (a checkout) on a fresh data folder; with
    ``census``, under bench/_census.py (an object census on SIGUSR1)."""
    serve = (
        [sys.executable, "-m", "bench._census"]
        if census
        else [str(Path(sys.executable).with_name("tiergate"))]
    )
    if census:
        env = {**env, "BENCH_CENSUS_PATH": str(tmp / "census"), "PYTHONPATH": f"{code}:{ROOT}"}
    return subprocess.Popen(
        [*serve, "serve", "--port", str(port)],
        cwd=ROOT,
        env={
            **os.environ,
            "TIERGATE_CLOUD__URLS": f"http://127.0.0.1:{upstream_port}",
            "TIERGATE_DATA_DIR": str(tmp / "data"),
            "TIERGATE_SERVER__LOG_LEVEL": "warning",
            "PYTHONPATH": str(code),
            **env,
        },
        stdout=(tmp / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def report(result: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    samples = result["samples"]
    seconds = args.minutes * 60
    tail = [s for s in samples if s[0] >= seconds / 3]
    per_hour = fit([s[0] / 3600 for s in tail], [s[1] for s in tail])[0]
    per_1k = fit([s[2] / 1000 for s in tail], [s[1] for s in tail])[0] if tail[-1][2] > tail[0][2] else 0.0
    print(f"{'minute':>7} {'RSS MiB':>8} {'requests':>9}")
    step = max(1, len(samples) // 20)
    for t, rss, n in samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else []):
        print(f"{t / 60:>7.1f} {rss:>8.1f} {int(n):>9}")
    print(f"\n{'kind':<13} {'requests':>9}  statuses")
    for kind, counts in result["statuses"].items():
        print(f"{kind:<13} {sum(counts.values()):>9}  {dict(sorted(counts.items()))}")
    sent = samples[-1][2]
    print(
        f"\n{int(sent)} requests in {samples[-1][0]:.0f} s ({sent / samples[-1][0]:.1f}/s; "
        f"asked for {args.rate}/s)"
    )
    print(
        f"RSS {samples[0][1]} → {samples[-1][1]} MiB (peak {max(s[1] for s in samples)}); after the first "
        f"third: {per_hour:+.1f} MiB/hour, {per_1k:+.3f} MiB per 1,000 requests"
    )
    return {"mib_per_hour_after_first_third": per_hour, "mib_per_1000_requests_after_first_third": per_1k}


def growth(tmp: Path) -> None:
    """What grew between the two censuses (bench/_census.py): types by count and bytes, big containers."""
    try:
        first, last = (json.loads((tmp / f"census.{i}.json").read_text()) for i in (1, 2))
    except OSError as exc:
        print(f"no census: {exc}")
        return
    grew = {t: last["bytes"][t] - first["bytes"].get(t, 0) for t in last["bytes"]}
    print("\ngrew (shallow bytes, objects) between the censuses:")
    for t, b in sorted(grew.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {t:<40} {b / 1e6:+8.2f} MB {last['counts'].get(t, 0) - first['counts'].get(t, 0):+9}")
    print("largest containers at the end:")
    for h in last["big"][:15]:
        print(f"  {h['type']:<12} {h['len']:>8}  {h['owners']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=40.0, help="requests a second (Poisson arrivals)")
    parser.add_argument("--every", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--only", choices=sorted(MIX), help="one kind of request alone")
    parser.add_argument("--seed", type=int, default=43)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the gateway (a setting)")
    parser.add_argument("--census", action="store_true", help="object censuses at 1/3 and the end (slow)")
    parser.add_argument("--out", help="the results file's name under bench/results/ (and no plot)")
    parser.add_argument(
        "--code", type=Path, default=ROOT, help="the checkout the gateway runs (before/after)"
    )
    args = parser.parse_args()
    mix = {args.only: 1.0} if args.only else MIX
    if args.only == "feedback":
        mix = {"chat": 0.5, "feedback": 0.5}
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-memsoak-"))
    upstream_port, port = free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, "bench/upstream.py", str(upstream_port)], cwd=ROOT)
    gateway = start_gateway(
        tmp, upstream_port, port, dict(e.split("=", 1) for e in args.env), args.code, args.census
    )
    try:
        credentials = tmp / "data" / "initial-credentials.json"
        wait_for_file(credentials, timeout=120)
        key = json.loads(credentials.read_text())["tenant_key"]
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{base}/readyz").json()["ready"]:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        result = asyncio.run(soak(base, key, gateway.pid, args, mix))
    finally:
        gateway.send_signal(signal.SIGTERM)
        try:
            gateway.wait(30)
        except subprocess.TimeoutExpired:
            gateway.kill()
        upstream.kill()
    figures = report(result, args)
    if args.census:
        growth(tmp)
    name = args.out or (f"memory_soak_{args.only}.json" if args.only else "memory_soak.json")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"method": __doc__, "args": {**vars(args), "code": str(args.code)}, "mix": mix, **figures, **result}
    (RESULTS / name).write_text(json.dumps(out, indent=1))
    print(f"wrote bench/results/{name}")
    if not args.only and not args.out:
        PLOT.parent.mkdir(parents=True, exist_ok=True)
        PLOT.write_text(svg(result["samples"], args.minutes * 60, figures["mib_per_hour_after_first_third"]))
        print(f"wrote {PLOT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
