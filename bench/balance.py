"""Load-aware balancing with session affinity vs round-robin, over two real vLLM replicas, in one run.

Method
------
* Two vLLM servers (the project's cloud model, CPU) are started once; two gateways are started in
  front of both, one with ``cloud.balancing = "least-load"`` (weighted least load + bounded-load
  affinity) and one with ``"round-robin"``. Edge disabled, result cache off.
* Workload (identical for both, seeded): ``--conversations`` multi-turn chats, each about its own
  long document (~1,000 tokens) that every turn repeats (so only a replica that saw the previous turn
  has the prefix cached),
  mixed with one-off long generations, sent by ``--concurrency`` clients. Each chat sends an
  ``X-Session-ID``.
* The strategies run alternately, ``--rounds`` times each; per strategy the table shows the median
  over rounds of p50/p99 request latency, throughput, and vLLM's own prefix-cache hit rate (from
  the replicas' ``vllm:prefix_cache_hits``/``queries`` counters, delta over the run).

    .venv/bin/python -m bench.balance [--conversations 8] [--turns 4] [--concurrency 6] [--rounds 2]

Prints a table and writes bench/results/balance.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import msgspec

from bench.overhead import free_port
from gateway.settings import load_settings
from tiers.cloud._local import LocalVLLMServer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "balance.json"
SYSTEM_SHORT = "You are a careful assistant. Answer from the document below, briefly."


def start_vllm(port: int, log: Path) -> subprocess.Popen[bytes]:
    local = msgspec.structs.replace(load_settings().local_vllm(), port=port, kv_cache_gib=1)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
    command = LocalVLLMServer(local, None).command()
    return subprocess.Popen(
        command, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def start_gateway(
    tmp: Path, name: str, urls: list[str], balancing: str
) -> tuple[subprocess.Popen[bytes], str, str]:
    folder = tmp / name
    folder.mkdir()
    port = free_port()
    config = folder / "tiergate.toml"
    config.write_text(
        f'data_dir = "{folder / "data"}"\n[edge]\nenabled = false\n[cache]\nenabled = false\n'
        f'[cloud]\nurls = {json.dumps(urls)}\nbalancing = "{balancing}"\n'
        "[admission]\nslots = {cloud = 64}\n[admission.fast]\nmax_queue_delay_s = 600\n"
        "[admission.slow]\nmax_queue_delay_s = 600\n"
    )
    tiergate = str(Path(sys.executable).with_name("tiergate"))
    proc = subprocess.Popen(
        [tiergate, "serve", "--config", str(config), "--port", str(port)],
        stdout=(folder / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    wait(lambda: "2/2" in httpx.get(f"{url}/readyz").json()["tiers"][0]["detail"], 300)
    key = json.loads((folder / "data" / "initial-credentials.json").read_text())["tenant_key"]
    return proc, url, key


def wait(ok: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ok():  # type: ignore[operator]
                return
        except (httpx.HTTPError, KeyError, IndexError):
            pass
        time.sleep(0.5)
    raise RuntimeError("timed out")


def prefix_counters(urls: list[str]) -> tuple[float, float]:
    hits = queries = 0.0
    for url in urls:
        for line in httpx.get(f"{url}/metrics").text.splitlines():
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.rsplit(" ", 1)[1])
    return hits, queries


def workload(conversations: int, turns: int, seed: int) -> list[list[dict[str, object]]]:
    """Per job, the requests it sends in order: a chat's turns, or one long generation."""
    rng = random.Random(seed)
    jobs: list[list[dict[str, object]]] = []
    for c in range(conversations):
        # Each conversation is about its own long document, so its prefix is cached only where it ran.
        document = " ".join(
            f"Fact {c}.{i}: item {rng.randint(0, 10**6)} weighs {rng.randint(1, 999)} g." for i in range(60)
        )
        history: list[dict[str, str]] = [{"role": "system", "content": f"{SYSTEM_SHORT}\n{document}"}]
        chat = []
        for t in range(turns):
            question = f"Question {t}: which item is heaviest, and what is {rng.randint(2, 99)} squared?"
            history = [*history, {"role": "user", "content": question}]
            chat.append({"session": f"chat-{seed}-{c}", "messages": list(history), "max_tokens": 24})
            history = [*history, {"role": "assistant", "content": "Let me look at the facts step by step."}]
        jobs.append(chat)
    for g in range(conversations // 2):
        jobs.append(
            [
                {
                    "session": None,
                    "messages": [{"role": "user", "content": f"Tell story number {g}."}],
                    "max_tokens": 96,
                }
            ]
        )
    rng.shuffle(jobs)
    return jobs


async def run_strategy(
    url: str, key: str, jobs: list[list[dict[str, object]]], concurrency: int
) -> dict[str, float]:
    queue: asyncio.Queue[list[dict[str, object]]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    latencies: list[float] = []
    errors = 0
    homes: dict[str, list[str]] = {}  # session -> the replica of each of its turns

    async def client() -> None:
        nonlocal errors
        async with httpx.AsyncClient(timeout=300, headers={"Authorization": f"Bearer {key}"}) as http:
            while not queue.empty():
                for req in queue.get_nowait():
                    headers = {"X-Session-ID": str(req["session"])} if req["session"] else {}
                    body = {
                        "model": "cloud",
                        "messages": req["messages"],
                        "max_tokens": req["max_tokens"],
                        "temperature": 0.7,
                    }
                    started = time.perf_counter()
                    resp = await http.post(f"{url}/v1/chat/completions", json=body, headers=headers)
                    if resp.status_code == 200:
                        latencies.append(time.perf_counter() - started)
                        if req["session"]:
                            served_by = resp.headers["x-tiergate-instance"]
                            homes.setdefault(str(req["session"]), []).append(served_by)
                    else:
                        errors += 1

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "p50_s": ordered[len(ordered) // 2],
        "p99_s": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
        "req_per_s": len(latencies) / elapsed,
        "errors": errors,
        # of the turns after a conversation's first, the share served where its previous turn was
        "same_replica_as_previous_turn": sum(a == b for h in homes.values() for a, b in itertools.pairwise(h))
        / max(1, sum(len(h) - 1 for h in homes.values())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=8)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-balance-"))
    ports = [free_port(), free_port()]
    replicas = [start_vllm(p, tmp / f"vllm-{p}.log") for p in ports]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    gateways = []
    try:
        for u in urls:
            wait(lambda u=u: httpx.get(f"{u}/health").status_code == 200, 900)
        gateways = [start_gateway(tmp, s, urls, s) for s in ("least-load", "round-robin")]
        results: dict[str, list[dict[str, float]]] = {"least-load": [], "round-robin": []}
        for r in range(args.rounds):
            for (_, url, key), name in zip(gateways, results, strict=True):
                jobs = workload(args.conversations, args.turns, seed=1000 * r + len(results[name]))
                before = prefix_counters(urls)
                row = asyncio.run(run_strategy(url, key, jobs, args.concurrency))
                after = prefix_counters(urls)
                queries = after[1] - before[1]
                row["prefix_cache_hit_rate"] = (after[0] - before[0]) / queries if queries else 0.0
                results[name].append(row)
                print(f"round {r} {name}: {row}", flush=True)
    finally:
        for proc, _, _ in gateways:
            proc.send_signal(signal.SIGTERM)
        for p in replicas:
            os.killpg(p.pid, signal.SIGKILL)
    table = {
        name: {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}
        for name, rows in results.items()
    }
    print(
        f"\n{'strategy':<12} {'p50 s':>7} {'p99 s':>7} {'req/s':>7} {'prefix hit':>10} "
        f"{'sticky':>7} {'errors':>7}"
    )
    for name, row in table.items():
        print(
            f"{name:<12} {row['p50_s']:>7.2f} {row['p99_s']:>7.2f} {row['req_per_s']:>7.2f} "
            f"{row['prefix_cache_hit_rate']:>10.2%} {row['same_replica_as_previous_turn']:>7.0%} "
            f"{row['errors']:>7.0f}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"method": __doc__, "args": vars(args), "rounds": results, "median": table}, indent=2)
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
