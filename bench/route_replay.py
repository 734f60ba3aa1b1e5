"""Trace replay: the same mixed trace through the gateway once per routing strategy, real tiers.

Method
------
* A gateway on its embedded defaults (the edge llama.cpp model in-process, the local vLLM server
  on the CPU as the cloud; result cache off so every request reaches a tier) is started, or
  ``--url`` names a running one.  ``tiergate calibrate`` first sends its probe workload to each
  tier (``--calibrate N`` probes per tier) and the predictors are fitted.
* A seeded trace (``generate``; ``--write-trace``/``--trace`` to keep or reuse one) mixes short
  chats, long generations, hard questions (reasoning, proofs), images and video, with arrival
  times (Poisson, ``--rate`` per second).  Images and video need a tier that accepts them (the
  multimodal branch and a VLM cloud); a request no tier can take (400 ``request_does_not_fit``)
  is counted as *unservable* and left out of SLO and cost.
* For each strategy the default tenant's policy is set through the admin API (the strategy and
  the objective ``--slo-ms`` total at p95), then the trace is replayed open-loop at its arrival
  times.  Per request: status, tier, client latency (total; time to first byte for streams),
  and the router's median prediction (``X-Tiergate-Predicted``, made before the request ran).
* Per strategy: cost from the ledger (``/admin/api/reports/costs`` over the run's window: what
  the requests were charged), SLO attainment (share of servable requests answered 200 within the
  objective), p50/p95/p99 latency, share per tier, and the predictor's MAPE (|predicted median
  − observed| / observed, over requests whose prediction came before they ran, i.e. held out).
  The learned strategy runs last, so it also learned online from the baselines' requests.
  ``--repeats`` runs the whole cycle again; the table shows medians over repeats.

    flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.route_replay [--requests 30] [--rate 0.5]

Prints a table and writes bench/results/route_replay.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import random
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

import httpx

from bench.overhead import free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "route_replay.json"
STRATEGIES = ("always-cloud", "always-edge", "round-robin", "rule", "learned")

# -- the trace ---------------------------------------------------------------------------------

_NAMES = ("Ada", "Grace", "Linus", "Ken", "Barbara", "Edsger", "Margaret", "Dennis")
_PLACES = ("France", "Japan", "Kenya", "Peru", "Norway", "Canada", "Chile", "Egypt")
_THINGS = ("a lighthouse", "a robot gardener", "the last train", "a lost map", "a quiet city", "an old clock")
_SHORT = (
    "Say hello to {name}.",
    "What is the capital of {place}?",
    "Give me one synonym for happy.",
    "Reply with a short greeting for {name}.",
    "Name a famous river in {place}.",
    "Translate 'good morning' into French.",
)
_LONG = (
    "Write a long story about {thing}, with several scenes.",
    "Write a detailed travel guide to {place}: history, food, places to visit.",
    "Describe {thing} in great detail, in many paragraphs.",
)
_HARD = (
    "Prove that there are infinitely many primes, step by step, and explain each step.",
    "Derive the formula for the sum of the first n squares and prove it by induction.",
    "Analyse the time complexity of quicksort on sorted input and prove the bound.",
    "Solve: two trains leave {place} an hour apart at 80 and 120 km/h; when do they meet? Show your work.",
)


def _png(size: int = 16) -> bytes:
    """A small valid PNG (a colour gradient), made without any imaging library."""
    rows = []
    for y in range(size):
        pixels = [c for x in range(size) for c in (x * 16 % 256, y * 16 % 256, 128)]
        rows.append(b"\x00" + bytes(pixels))
    raw = b"".join(rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def generate(requests: int, rate: float, seed: int = 1) -> list[dict[str, Any]]:
    """A mixed trace: 50% short chats, 20% long generations, 14% hard questions, 8% images,
    8% video; half of them streamed; Poisson arrivals at ``rate`` per second."""
    rng = random.Random(seed)
    png = "data:image/png;base64," + base64.b64encode(_png()).decode()
    video = "data:video/mp4;base64," + base64.b64encode(b"\x00\x00\x00\x18ftypmp42" + bytes(64)).decode()
    fill = {"name": "", "place": "", "thing": ""}
    # The mix in exact proportions (shuffled), so a small trace is still the mix it claims to be.
    weights = {"short": 0.50, "long": 0.20, "hard": 0.14, "image": 0.08, "video": 0.08}
    kinds = [k for k, w in weights.items() for _ in range(round(w * requests))]
    kinds = (kinds + ["short"] * requests)[:requests]
    rng.shuffle(kinds)
    trace, at = [], 0.0
    for i, kind in enumerate(kinds):
        at += rng.expovariate(rate)
        fill = {"name": rng.choice(_NAMES), "place": rng.choice(_PLACES), "thing": rng.choice(_THINGS)}
        if kind == "short":
            content: Any = rng.choice(_SHORT).format(**fill)
            max_tokens = rng.choice((24, 32, 48))
        elif kind == "long":
            content, max_tokens = rng.choice(_LONG).format(**fill), rng.choice((192, 256))
        elif kind == "hard":
            content, max_tokens = rng.choice(_HARD).format(**fill), 96
        elif kind == "image":
            content = [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": png}},
            ]
            max_tokens = 48
        else:
            content = [
                {"type": "text", "text": "Describe this clip."},
                {"type": "video_url", "video_url": {"url": video}},
            ]
            max_tokens = 64
        trace.append(
            {
                "id": f"r{i:04d}",
                "at": round(at, 3),
                "tenant": "default",
                "kind": kind,
                "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens,
                "stream": rng.random() < 0.5,
            }
        )
    return trace


# -- the gateway -------------------------------------------------------------------------------


def start_gateway(tmp: Path) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    port = free_port()
    config = tmp / "tiergate.toml"
    config.write_text(
        f'data_dir = "{tmp / "data"}"\n[cache]\nenabled = false\n[ledger]\nflush_interval_s = 0.2\n'
    )
    tiergate = str(Path(sys.executable).with_name("tiergate"))
    proc = subprocess.Popen(
        [tiergate, "serve", "--config", str(config), "--port", str(port)],
        stdout=(tmp / "gateway.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the gateway exited:\n{(tmp / 'gateway.log').read_text()[-3000:]}")
        try:
            tiers = {t["name"]: t["health"] for t in httpx.get(f"{url}/readyz", timeout=5).json()["tiers"]}
            if tiers.get("edge") == "ready" and tiers.get("cloud") == "ready":
                break
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1)
    else:
        raise SystemExit("the tiers did not become ready in 15 minutes")
    creds = json.loads((tmp / "data" / "initial-credentials.json").read_text())
    return proc, url, {"key": creds["tenant_key"], "admin": creds["admin_key"]}


# -- one replay --------------------------------------------------------------------------------


async def _one(client: httpx.AsyncClient, entry: dict[str, Any], t0: float) -> dict[str, Any]:
    await asyncio.sleep(max(0.0, t0 + entry["at"] - time.perf_counter()))
    body = {
        "model": "tiergate-auto",
        "messages": entry["messages"],
        "max_tokens": entry["max_tokens"],
        "stream": entry["stream"],
        "temperature": 0.7,
    }
    started = time.perf_counter()
    first = None
    out: dict[str, Any] = {"id": entry["id"], "kind": entry["kind"], "stream": entry["stream"]}
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            pieces = []
            async for piece in resp.aiter_bytes():
                if first is None:
                    first = time.perf_counter() - started
                if resp.status_code != 200:
                    pieces.append(piece)
            text = b"".join(pieces)
            out.update(
                status=resp.status_code,
                tier=resp.headers.get("x-tiergate-tier", ""),
                reason=resp.headers.get("x-tiergate-route-reason", ""),
                predicted=resp.headers.get("x-tiergate-predicted", ""),
                error=text.decode(errors="replace")[:300],
            )
    except httpx.HTTPError as exc:
        out.update(status=0, tier="", reason="", predicted="", error=str(exc))
    out["seconds"] = time.perf_counter() - started
    out["ttfb"] = first
    return out


def _predicted_total(header: str) -> float | None:
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "total" and value.endswith("ms"):
            return float(value[:-2]) / 1000
    return None


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def replay(
    url: str, keys: dict[str, str], trace: list[dict[str, Any]], strategy: str, slo_ms: float
) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    policy = {"strategy": strategy, "latency": {"total_ms": slo_ms, "percentile": 95}, "cache": False}
    async with httpx.AsyncClient(base_url=url, timeout=900) as client:
        resp = await client.put("/admin/api/tenants/default/policy", json=policy, headers=admin)
        resp.raise_for_status()
    since = dt.datetime.now(dt.UTC)
    headers = {"Authorization": f"Bearer {keys['key']}", "Cache-Control": "no-store"}
    limits = httpx.Limits(max_connections=200)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=900, limits=limits) as client:
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_one(client, e, t0) for e in trace))
    await asyncio.sleep(2)  # the ledger's rows reach the database
    until = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        params = {
            "tenant": "default",
            "since": since.isoformat(),
            "until": until.isoformat(),
            "group_by": "tier",
        }
        report = (await client.get("/admin/api/reports/costs", params=params, headers=admin)).json()
    return summarise(strategy, results, report, slo_ms)


def summarise(
    strategy: str, results: list[dict[str, Any]], report: dict[str, Any], slo_ms: float
) -> dict[str, Any]:
    unservable = [r for r in results if r["status"] == 400 and "request_does_not_fit" in r.get("error", "")]
    servable = [r for r in results if r not in unservable]
    ok = [r for r in servable if r["status"] == 200]
    met = [r for r in ok if r["seconds"] * 1000 <= slo_ms]
    latencies = [r["seconds"] for r in ok]
    errors = []
    for r in ok:
        predicted = _predicted_total(r["predicted"])
        if predicted is not None and r["seconds"] > 0:
            errors.append(abs(predicted - r["seconds"]) / r["seconds"])
    share = (
        {t: sum(1 for r in ok if r["tier"] == t) / len(ok) for t in sorted({r["tier"] for r in ok})}
        if ok
        else {}
    )
    statuses: dict[str, int] = {}
    for r in results:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    return {
        "strategy": strategy,
        "requests": len(results),
        "unservable": len(unservable),
        "statuses": statuses,
        "cost_usd": report["total"]["cost_usd"],
        "counterfactual_usd": report["total"]["counterfactual_usd"],
        "slo_attainment": len(met) / len(servable) if servable else None,
        "p50_s": _pct(latencies, 0.5),
        "p95_s": _pct(latencies, 0.95),
        "p99_s": _pct(latencies, 0.99),
        "share": share,
        "mape": statistics.fmean(errors) if errors else None,
        "mape_n": len(errors),
        "by_kind": {
            kind: {
                "n": sum(1 for r in ok if r["kind"] == kind),
                "edge": sum(1 for r in ok if r["kind"] == kind and r["tier"] == "edge"),
                "p50_s": _pct([r["seconds"] for r in ok if r["kind"] == kind], 0.5),
            }
            for kind in sorted({r["kind"] for r in ok})
        },
        "results": results,
    }


def _median(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(rows: list[dict[str, Any]], cloud_cost: float | None) -> str:
    def f(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    lines = [
        "| strategy | cost USD | vs always-cloud | SLO attained | p50 / p95 / p99 s | edge share "
        "| MAPE (n) | statuses |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        change = None if not cloud_cost else r["cost_usd"] / cloud_cost - 1
        lines.append(
            f"| {r['strategy']} | {r['cost_usd']:.6f} | {f(change, '+.0%')} "
            f"| {f(r['slo_attainment'], '.0%')} "
            f"| {f(r['p50_s'], '.1f')} / {f(r['p95_s'], '.1f')} / {f(r['p99_s'], '.1f')} "
            f"| {f(r['share'].get('edge', 0.0), '.0%')} | {f(r['mape'], '.0%')} ({r['mape_n']}) "
            f"| {r['statuses']} |"
        )
    return "\n".join(lines)


def decision_time(samples: int = 5000) -> dict[str, float]:
    """In-process cost of one learned-strategy decision (features → predictions for both tiers,
    difficulty, policy, reason), the router's share of the request path."""
    import router
    from tiers import Capabilities, Health, Modality, TierState

    text = frozenset({Modality.TEXT})
    views = [
        router.TierView(n, Capabilities(text, 2048, n, quality=q), TierState(n, Health.READY, 1, 2))
        for n, q in (("edge", 0.4), ("cloud", 0.7))
    ]
    prices = {"edge": router.TierPrice(0.00002, 0.00004), "cloud": router.TierPrice(0.0005, 0.0015)}
    r = router.Router(router.AutoRule(), prices, difficulty=router.builtin_model())
    policy = router.TenantPolicy(latency=router.LatencyObjective(total_ms=30000))
    f = router.Features.estimate(
        text_chars=90,
        turns=1,
        max_tokens=48,
        modalities=text,
        stream=True,
        text="Write a detailed travel guide to Norway: history, food, places to visit.",
    )
    for _ in range(500):
        r.decide("tiergate-auto", views, f, policy)
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        r.decide("tiergate-auto", views, f, policy)
        times.append(time.perf_counter() - started)
    times.sort()
    return {"p50_us": times[samples // 2] * 1e6, "p99_us": times[int(samples * 0.99)] * 1e6}


async def calibrate(url: str, keys: dict[str, str], per_tier: int) -> dict[str, Any]:
    from gateway.calibration import calibrate as run

    return await run(url, keys["key"], keys["admin"], ["edge", "cloud"], per_tier)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--rate", type=float, default=0.5, help="arrivals per second")
    parser.add_argument("--slo-ms", type=float, default=30000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--calibrate", type=int, default=16, help="probes per tier before the replays (0: none)"
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--trace", type=Path, help="replay this JSONL trace instead of generating one")
    parser.add_argument("--write-trace", type=Path, help="write the generated trace here and exit")
    parser.add_argument("--url", help="a running gateway (else one is started on the embedded defaults)")
    parser.add_argument("--key")
    parser.add_argument("--admin-key")
    args = parser.parse_args()

    if args.trace:
        trace = [json.loads(line) for line in args.trace.read_text().splitlines() if line.strip()]
    else:
        trace = generate(args.requests, args.rate, args.seed)
    if args.write_trace:
        args.write_trace.write_text("".join(json.dumps(e) + "\n" for e in trace))
        print(f"wrote {len(trace)} requests to {args.write_trace}")
        return

    proc = None
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-replay-"))
    if args.url:
        url, keys = args.url, {"key": args.key, "admin": args.admin_key}
    else:
        proc, url, keys = start_gateway(tmp)
    strategies = args.strategies.split(",")
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in strategies}
    calibration = None
    try:
        if args.calibrate:
            started = time.monotonic()
            calibration = asyncio.run(calibrate(url, keys, args.calibrate))
            calibration["seconds"] = time.monotonic() - started
            print(f"calibrated in {calibration['seconds']:.0f} s: {calibration['sent']} probes", flush=True)
        for repeat in range(args.repeats):
            for strategy in strategies:
                result = asyncio.run(replay(url, keys, trace, strategy, args.slo_ms))
                runs[strategy].append(result)
                print(
                    f"repeat {repeat + 1} {strategy}: cost ${result['cost_usd']:.6f}, "
                    f"SLO {result['slo_attainment']}, share {result['share']}, statuses {result['statuses']}",
                    flush=True,
                )
        with httpx.Client(base_url=url, timeout=60) as client:
            router_state = client.get(
                "/admin/api/router", headers={"Authorization": f"Bearer {keys['admin']}"}
            ).json()
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()

    rows = []
    for strategy, results in runs.items():
        rows.append(
            {
                "strategy": strategy,
                "cost_usd": _median([r["cost_usd"] for r in results]),
                "slo_attainment": _median([r["slo_attainment"] for r in results]),
                "p50_s": _median([r["p50_s"] for r in results]),
                "p95_s": _median([r["p95_s"] for r in results]),
                "p99_s": _median([r["p99_s"] for r in results]),
                "share": {t: _median([r["share"].get(t, 0.0) for r in results]) for t in ("edge", "cloud")},
                "mape": _median([r["mape"] for r in results]),
                "mape_n": sum(r["mape_n"] for r in results),
                "statuses": results[-1]["statuses"],
                "unservable": results[-1]["unservable"],
            }
        )
    cloud = next((r["cost_usd"] for r in rows if r["strategy"] == "always-cloud"), None)
    decision = decision_time()
    print(table(rows, cloud))
    print(
        f"one learned decision in-process: p50 {decision['p50_us']:.0f} us, p99 {decision['p99_us']:.0f} us"
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "method": __doc__,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "trace_kinds": {
                    k: sum(1 for e in trace if e["kind"] == k) for k in sorted({e["kind"] for e in trace})
                },
                "calibration": calibration,
                "decision": decision,
                "summary": rows,
                "runs": runs,
                "router": router_state,
            },
            indent=1,
        )
    )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
