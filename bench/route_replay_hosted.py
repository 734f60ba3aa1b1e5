"""The route replay's three-tier case (``bench.route_replay --hosted``): the edge, the vLLM pool and a
hosted model, with savings against sending everything to the hosted model.

Method
------
* Everything else is ``bench.route_replay``'s (its docstring): the embedded defaults (the edge
  llama.cpp SmolLM2-135M in-process, the local vLLM on the CPU serving the SmolVLM-architecture VLM
  as the ``cloud`` pool; result cache off), the same seeded mixed trace (short chats, long
  generations, hard questions, images, video; half streamed; Poisson arrivals at ``--rate``), the
  same objective (total time <= ``--slo-ms`` at p95, every request) and per-strategy figures.
* The third tier, ``gpt``: ``[tiers.gpt]`` with ``kind = "provider"``, ``protocol = "openai"``,
  ``model = "gpt-4.1-mini"``, declared quality 0.9 (the cloud pool's is 0.7, the edge's 0.4), its
  key from an environment variable, its base URL the OpenAI stand-in of the provider tests
  (``bench/hosted_standin.py``: every body checked against the ``openai`` SDK's types and OpenAI's
  OpenAPI document) on loopback over TLS, trusted through ``ca_file`` (a ``trustme`` test CA).  The
  stand-in runs in its own process (uvicorn, HTTP/1.1: uvicorn offers no HTTP/2) with a seeded
  latency model (``tests/standins/latency.py``): time to first token lognormal, median
  ``--ttft-median-s`` (0.5 s), shape ``--ttft-sigma`` (0.4); each request streams at a rate drawn
  uniform in [``--tokens-per-s-low``, ``--tokens-per-s-high``] (60-100 tokens/s); the answer's
  natural length lognormal, median ``--answer-median-tokens`` (300), shape 0.6, cut at the
  request's ``max_tokens`` (so most answers run to it, as the local tiers' do).  These are assumed
  parameters of the order OpenAI's small models show, not measurements of OpenAI.  The stand-in
  counts a token per word of the answer and a token per 4 characters of the messages; it reports
  no cached input (OpenAI caches only prompts of 1,024 tokens and more; the trace's are shorter).
* Prices (``[[pricing.prices]]``): edge and cloud at the embedded defaults (per 1k tokens: edge
  $0.00002 in / $0.00004 out; cloud $0.0005 in / $0.0015 out, $0.001 an image); ``gpt`` at
  gpt-4.1-mini's list price, per 1M tokens $0.40 input, $0.10 cached input, $1.60 output
  (docs/performance.md names the source).  ``pricing.counterfactual_tier = "gpt"``: the ledger's
  counterfactual is what each request's usage would have cost at the hosted price.
* ``tiergate calibrate`` sends ``--calibrate`` probes to each of the three tiers first, so the
  router has seen the hosted tier's latency (it learns it from what it observes, as for the others).
* Strategies (``--strategies``; by default): ``always:gpt`` (the baseline: everything the hosted
  model can take goes there; video only the cloud takes), ``always-cloud``, ``always-edge``,
  ``learned`` (last: it also learned online from the others' requests).  ``rule``,
  ``round-robin`` and ``learned-no-difficulty`` can be added; they are left out by default to keep
  a run under ~8 minutes on 2 cores.
* Per strategy: cost (the ledger over the run's window), ``vs always:gpt`` (cost against the
  always:gpt run's, same trace), the ledger's own counterfactual at the hosted price, SLO
  attainment, p50/p95, the share per tier, ``below_quality`` (answers from a tier whose declared
  quality is below the request's estimated difficulty while a better tier could take it), and the
  load average before and after (2 cores, shared with other work).

    PYTHONPATH=$PWD flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.route_replay --hosted \\
        --requests 30 --rate 0.5 --slo-ms 15000 --calibrate 4

Prints a table and writes bench/results/route_replay_hosted.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.hosted_standin import add_latency_options
from bench.overhead import free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "route_replay_hosted.json"
HOSTED = "gpt"
STRATEGIES = (f"always:{HOSTED}", "always-cloud", "always-edge", "learned")
TIERS = ("edge", "cloud", HOSTED)
HOSTED_QUALITY = 0.9
KEY_ENV = "BENCH_HOSTED_OPENAI_KEY"  # not TIERGATE_*: those are read as settings
# gpt-4.1-mini's list price, USD per 1k tokens (per 1M: $0.40 input, $0.10 cached input, $1.60 output).
HOSTED_PRICE = {"prompt_per_1k": 0.0004, "cached_prompt_per_1k": 0.0001, "completion_per_1k": 0.0016}


def add_options(parser: argparse.ArgumentParser) -> None:
    """The three-tier case's options, beside bench.route_replay's."""
    parser.add_argument(
        "--hosted",
        action="store_true",
        help="three tiers: edge, the vLLM pool and a hosted model (the OpenAI stand-in over TLS)",
    )
    add_latency_options(parser)


def start_hosted(tmp: Path, seed: int, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str, Path]:
    """The stand-in in its own process over TLS: (process, base URL, the CA file to trust)."""
    from tests.standins.tls import TestCA

    certs = tmp / "hosted"
    ca = TestCA.make(certs)
    key = "sk-bench-" + secrets.token_hex(16)
    os.environ[KEY_ENV] = key  # the gateway, started after, reads it (api_key_env)
    port = free_port()
    latency = [
        f"--{name.replace('_', '-')}={getattr(args, name)}"
        for name in (
            "ttft_median_s",
            "ttft_sigma",
            "tokens_per_s_low",
            "tokens_per_s_high",
            "answer_median_tokens",
            "answer_sigma",
        )
    ]
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "bench.hosted_standin", "--port", str(port), "--certs", str(certs)),
            *("--key", key, "--seed", str(seed), *latency),
        ],
        stdout=(tmp / "hosted.log").open("wb"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 60
    while not (certs / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(
                f"the hosted stand-in did not start:\n{(tmp / 'hosted.log').read_text()[-2000:]}"
            )
        time.sleep(0.2)
    return proc, f"https://127.0.0.1:{port}/v1", ca.ca_file


def gateway_config(base_url: str, ca_file: Path) -> str:
    """The settings added to the embedded defaults: the hosted tier and the three tiers' prices."""
    from gateway.accounts.ledger import DEFAULT_PRICES

    rows = []
    for price in DEFAULT_PRICES:
        fields = {k: v for k, v in _fields(price).items() if v is not None}
        rows.append(_price_row(fields))
    rows.append(_price_row({"tier": HOSTED, "model": "*", **HOSTED_PRICE}))
    return (
        f'[tiers.{HOSTED}]\nkind = "provider"\nprotocol = "openai"\nbase_url = "{base_url}"\n'
        f'model = "gpt-4.1-mini"\napi_key_env = "{KEY_ENV}"\nca_file = "{ca_file}"\n'
        f"quality = {HOSTED_QUALITY}\n"
        f'[pricing]\ncounterfactual_tier = "{HOSTED}"\n' + "".join(rows)
    )


def _fields(price: Any) -> dict[str, Any]:
    return {name: getattr(price, name) for name in price.__struct_fields__}


def _price_row(fields: dict[str, Any]) -> str:
    return "[[pricing.prices]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


def tier_quality() -> dict[str, float]:
    from gateway.settings import Settings

    settings = Settings()
    return {"edge": settings.edge.quality, "cloud": settings.cloud.quality, HOSTED: HOSTED_QUALITY}


def table(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    lines = [
        "| strategy | cost USD | vs always-hosted | ledger counterfactual at the hosted price | SLO attained "
        "| p50 / p95 s | share edge / cloud / hosted | below quality | statuses | load before, after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        share = " / ".join(f(r["share"].get(t, 0.0), ".0%") for t in TIERS)
        lines.append(
            f"| {r['strategy']} | {r['cost_usd']:.6f} | {f(r.get('vs_hosted'), '+.1%')} "
            f"| {r['counterfactual_usd']:.6f} | {f(r['slo_attainment'], '.0%')} "
            f"| {f(r['p50_s'], '.1f')} / {f(r['p95_s'], '.1f')} | {share} | {r['below_quality']} "
            f"| {r['statuses']} | {r['load']} |"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace, trace: list[dict[str, Any]]) -> None:
    """Start the stand-in and the gateway, calibrate the three tiers, replay each strategy once."""
    from bench import route_replay as rr
    from gateway.tools.calibration import calibrate

    tmp = Path(tempfile.mkdtemp(prefix="tiergate-replay-hosted-"))
    hosted, base_url, ca_file = start_hosted(tmp, args.seed, args)
    proc = None
    strategies = args.strategies.split(",") if args.strategies != ",".join(rr.STRATEGIES) else STRATEGIES
    rows, calibration, router_state = [], None, None
    started = time.monotonic()
    try:
        proc, url, keys = rr.start_gateway(tmp, extra=gateway_config(base_url, ca_file))
        print(f"gateway ready in {time.monotonic() - started:.0f} s", flush=True)
        if args.calibrate:
            t0 = time.monotonic()
            calibration = asyncio.run(calibrate(url, keys["key"], keys["admin"], list(TIERS), args.calibrate))
            calibration["seconds"] = time.monotonic() - t0
            print(f"calibrated in {calibration['seconds']:.0f} s: {calibration['sent']} probes", flush=True)
        for strategy in strategies:
            row = asyncio.run(rr.replay(url, keys, trace, strategy, args.slo_ms, tier_quality()))
            rows.append(row)
            print(
                f"{strategy}: cost ${row['cost_usd']:.6f}, SLO {row['slo_attainment']}, "
                f"share {row['share']}, below quality {row['below_quality']}, "
                f"statuses {row['statuses']}, load {row['load']}",
                flush=True,
            )
        with httpx.Client(base_url=url, timeout=60) as client:
            router_state = client.get(
                "/admin/api/router", headers={"Authorization": f"Bearer {keys['admin']}"}
            ).json()
    finally:
        for child in (proc, hosted):
            if child is not None:
                child.terminate()
                try:
                    child.wait(60)
                except subprocess.TimeoutExpired:
                    child.kill()
    served = tmp / "hosted" / "served.json"
    standin = json.loads(served.read_text()) if served.exists() else None
    baseline = next((r["cost_usd"] for r in rows if r["strategy"] == f"always:{HOSTED}"), None)
    for r in rows:
        r["vs_hosted"] = r["cost_usd"] / baseline - 1 if baseline else None
    print(table(rows))
    if standin is not None:
        print(
            f"the stand-in served {standin['requests']} requests, "
            f"refused as invalid {len(standin['invalid'])}"
        )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "method": __doc__,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "seconds": time.monotonic() - started,
                "hosted_price_per_1k": HOSTED_PRICE,
                "quality": tier_quality(),
                "trace_kinds": {
                    k: sum(1 for e in trace if e["kind"] == k) for k in sorted({e["kind"] for e in trace})
                },
                "calibration": calibration,
                "standin": standin,
                "summary": [{k: v for k, v in r.items() if k not in ("results", "errors")} for r in rows],
                "runs": rows,
                "router": router_state,
            },
            indent=1,
        )
    )
    print(f"wrote {RESULTS}")
