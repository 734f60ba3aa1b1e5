"""Edge chats while the cloud works, with the CPUs split between the engines and without.

Method
------
* A gateway on its embedded defaults (edge llama.cpp in-process, the local vLLM server beside it,
  result cache off) is started twice in this command: once with ``cloud.local.split_cpus = false``
  (nothing pinned: vLLM binds its OpenMP thread itself, everything else floats) and once with the
  default split (tiers/_cpus.py).  Each is warmed with 3 requests per tier.
* *Idle*: 8 edge chats one after another ("Say hello to Ada.", ``max_tokens`` 32, sampled at
  temperature 0.7), nothing else running: the median time.
* *Busy*: 3 long cloud generations (256 tokens each) at once, and beside them ``--media`` clients
  that each send the cloud an image (a 256 px PNG) then a 4 s MPEG-4 clip, three times; while the
  long ones run, edge chats one after another.  Reported: the edge chats' median and worst time,
  and how long the 3 long generations took, against the same 3 with nothing else running.
* Times are the client's (httpx), whole answers (not streamed).  Every request must get 200.
  ``--repeats`` runs each configuration again; the table shows medians of the per-run figures.

    flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.cpu_split [--repeats 1] [--media 2]

Prints a table and writes bench/results/cpu_split.json.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.route_replay import _png, start_gateway
from gateway.tools.calibration import mp4_clip

RESULTS = Path(__file__).resolve().parent / "results" / "cpu_split.json"
CONFIGS = {"unsplit": "[cloud.local]\nsplit_cpus = false\n", "split": ""}
SHORT = "Say hello to Ada."
LONG = "Write a long story about a lighthouse."


async def _chat(client: httpx.AsyncClient, model: str, content: Any, max_tokens: int) -> float:
    started = time.perf_counter()
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0.7,
    }
    resp = await client.post("/v1/chat/completions", json=body)
    resp.raise_for_status()
    return time.perf_counter() - started


async def _measure(url: str, key: str, media_clients: int) -> dict[str, Any]:
    image = [
        {"type": "text", "text": "What is in this picture?"},
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + base64.b64encode(_png(256)).decode()},
        },
    ]
    clip = [
        {"type": "text", "text": "Describe this clip."},
        {
            "type": "video_url",
            "video_url": {"url": "data:video/mp4;base64," + base64.b64encode(mp4_clip(4)).decode()},
        },
    ]
    headers = {"Authorization": f"Bearer {key}", "Cache-Control": "no-store"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as client:
        for _ in range(3):
            await _chat(client, "edge", SHORT, 32)
            await _chat(client, "cloud", SHORT, 16)
        idle = [await _chat(client, "edge", SHORT, 32) for _ in range(8)]
        started = time.perf_counter()
        await asyncio.gather(*(_chat(client, "cloud", LONG, 256) for _ in range(3)))
        cloud_alone = time.perf_counter() - started

        async def media() -> None:
            for _ in range(3):
                await _chat(client, "cloud", image, 48)
                await _chat(client, "cloud", clip, 64)

        started = time.perf_counter()
        longs = asyncio.gather(*(_chat(client, "cloud", LONG, 256) for _ in range(3)))
        others = [asyncio.ensure_future(media()) for _ in range(media_clients)]
        busy = []
        while not longs.done():
            busy.append(await _chat(client, "edge", SHORT, 32))
        await longs
        cloud_busy = time.perf_counter() - started
        await asyncio.gather(*others)
    return {
        "edge_idle_s": statistics.median(idle),
        "edge_busy_s": statistics.median(busy),
        "edge_busy_max_s": max(busy),
        "edge_busy_n": len(busy),
        "cloud_3_long_alone_s": cloud_alone,
        "cloud_3_long_busy_s": cloud_busy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--media", type=int, default=2, help="clients sending the cloud images and clips")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for _ in range(args.repeats):
        for name, extra in CONFIGS.items():
            with tempfile.TemporaryDirectory() as tmp:
                proc, url, keys = start_gateway(Path(tmp), extra=extra)
                try:
                    runs[name].append(asyncio.run(_measure(url, keys["key"], args.media)))
                finally:
                    proc.terminate()
                    proc.wait(60)
            print(name, json.dumps(runs[name][-1]), flush=True)
    summary = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}
    print(
        "| CPUs | edge chat idle s | edge chat, cloud busy: median / worst s (n) "
        "| 3 long cloud generations alone / busy s |"
    )
    print("|---|---|---|---|")
    for name, s in summary.items():
        print(
            f"| {name} | {s['edge_idle_s']:.2f} | {s['edge_busy_s']:.2f} / {s['edge_busy_max_s']:.2f} "
            f"({s['edge_busy_n']:.0f}) | {s['cloud_3_long_alone_s']:.1f} / {s['cloud_3_long_busy_s']:.1f} |"
        )
    RESULTS.write_text(
        json.dumps({"method": __doc__, "args": vars(args), "summary": summary, "runs": runs}, indent=1) + "\n"
    )


if __name__ == "__main__":
    main()
