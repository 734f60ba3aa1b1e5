"""``tiergate calibrate``: a generated probe workload sent to each tier through a running gateway.

Each probe is pinned to one tier (``model: edge`` / ``cloud``) and bypasses the result cache,
so the gateway's router observes it exactly as it observes live traffic (the same features,
the same live tier state); then ``POST /admin/api/router/refit`` fits and saves the predictors.
The workload mixes prompt lengths, output lengths, streaming, images and short video clips
(sent only while the tier takes them: the first refusal makes the rest of that tier's media
probes plain text), and a few levels of concurrency, first at each tier alone and then at all
the tiers at once, so the models see both the queueing at a tier and the slowdown the tiers
cause each other when they share a machine's cores.
"""

from __future__ import annotations

import asyncio
import base64
import io
import random
import time
import zlib
from dataclasses import dataclass, field
from typing import Any

import httpx

_TEXT = (
    "the gateway routes each request to an edge model or a cloud pool and learns how long every "
    "tier takes so that it can meet each tenant's latency objective at the lowest cost while "
    "keeping the quality the request needs"
)
MEDIA_SHARE = 0.25  # of the probes carry an image or a video clip


@dataclass(frozen=True, slots=True)
class Probe:
    prompt: str
    max_tokens: int
    stream: bool
    media: tuple[dict[str, Any], ...] = field(default=())  # OpenAI content parts after the text

    def body(self, tier: str, with_media: bool = True) -> dict[str, Any]:
        content: Any = self.prompt
        if self.media and with_media:
            content = [{"type": "text", "text": self.prompt}, *self.media]
        body: dict[str, Any] = {
            "model": tier,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": self.max_tokens,
            "stream": self.stream,
            "temperature": 0.8,
        }
        return body


def _image_part(side: int, seed: int) -> dict[str, Any]:
    """A PNG of ``side`` x ``side`` pixels of noise over a gradient."""
    from PIL import Image

    rng = random.Random(seed)
    image = Image.linear_gradient("L").resize((side, side)).convert("RGB")
    for _ in range(side):
        image.putpixel((rng.randrange(side), rng.randrange(side)), (rng.randrange(256), 0, 0))
    out = io.BytesIO()
    image.save(out, "PNG")
    url = "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()
    return {"type": "image_url", "image_url": {"url": url}}


def mp4_clip(seconds: int, fps: int = 8, size: tuple[int, int] = (160, 120)) -> bytes:
    """A real MPEG-4 clip whose frames change brightness (made with PyAV)."""
    import av
    import numpy as np

    out = io.BytesIO()
    with av.open(out, "w", format="mp4") as c:
        stream = c.add_stream("mpeg4", rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = fps
        for i in range(seconds * fps):
            pixels = np.full((size[1], size[0], 3), (i * 7) % 256, np.uint8)
            pixels[:, : size[0] // 4, 0] = 255 - (i * 7) % 256
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    return out.getvalue()


def _video_part(seconds: int) -> dict[str, Any]:
    url = "data:video/mp4;base64," + base64.b64encode(mp4_clip(seconds)).decode()
    return {"type": "video_url", "video_url": {"url": url}}


def probe_workload(count: int, seed: int = 1, media: bool = True) -> list[Probe]:
    """Prompts of ~10 to ~600 tokens asking for long or one-line answers, max_tokens 8 to 256,
    half streamed; with ``media``, a quarter of them also carry one or two images (64 to 256
    px) or a 2 to 5 s video clip."""
    rng = random.Random(seed)
    vocabulary = _TEXT.split()
    probes = []
    for i in range(count):
        words = rng.choice((8, 30, 120, 450))
        text = " ".join(rng.choice(vocabulary) for _ in range(words))
        if rng.random() < 0.5:  # answers that run to max_tokens, and answers that stop early
            prompt = f"Probe {i}. Continue this text for as long as you are allowed: {text}"
        else:
            prompt = f"Probe {i}. In one short sentence, what is the main word of this text? {text}"
        max_tokens, stream = rng.choice((8, 32, 96, 192, 256)), rng.random() < 0.5
        parts: tuple[dict[str, Any], ...] = ()
        if media and rng.random() < MEDIA_SHARE:
            if rng.random() < 0.6:
                sides = [rng.choice((64, 128, 256)) for _ in range(rng.choice((1, 1, 2)))]
                parts = tuple(_image_part(s, seed * 1000 + i) for s in sides)
                prompt = f"Probe {i}. Describe the picture. {' '.join(text.split()[:20])}"
            else:
                parts = (_video_part(rng.randint(2, 5)),)
                prompt = f"Probe {i}. Describe this clip. {' '.join(text.split()[:20])}"
            max_tokens = rng.choice((16, 48, 96))
        probes.append(Probe(prompt, max_tokens, stream, parts))
    return probes


async def _send(client: httpx.AsyncClient, tier: str, probe: Probe, text_only: set[str]) -> dict[str, Any]:
    """Send ``probe`` to ``tier``; a tier that refuses its media gets it as text (and every later
    probe too: ``text_only`` remembers it)."""
    with_media = bool(probe.media) and tier not in text_only
    started = time.perf_counter()
    status, refused = 0, b""
    async with client.stream("POST", "/v1/chat/completions", json=probe.body(tier, with_media)) as resp:
        status = resp.status_code
        async for piece in resp.aiter_bytes():
            if status != 200:
                refused += piece
    if with_media and status == 400 and b"request_does_not_fit" in refused:
        text_only.add(tier)
        return await _send(client, tier, probe, text_only)
    return {"tier": tier, "status": status, "seconds": time.perf_counter() - started}


async def calibrate(
    url: str,
    key: str,
    admin_key: str,
    tiers: list[str],
    per_tier: int,
    concurrency: tuple[int, ...] = (1, 2, 3),
    timeout_s: float = 600.0,
    media: bool = True,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """Send ``per_tier`` probes to each tier, then refit.  The first half of each tier's probes
    go to it alone (in rounds at each concurrency), the second half to every tier at once (a
    round of each tier's next probes side by side), so the predictors also see the other tiers'
    load."""
    headers = {"Authorization": f"Bearer {key}", "Cache-Control": "no-store"}
    results: list[dict[str, Any]] = []
    text_only: set[str] = set()
    widest = max(concurrency)

    def width(i: int) -> int:
        return concurrency[(i // widest) % len(concurrency)]

    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=timeout_s, transport=transport
    ) as client:
        workloads = {t: probe_workload(per_tier, seed=zlib.crc32(t.encode()), media=media) for t in tiers}
        alone = {t: w[: (per_tier + 1) // 2] if len(tiers) > 1 else w for t, w in workloads.items()}
        together = {t: w[len(alone[t]) :] for t, w in workloads.items()}
        for tier in tiers:
            probes, i = alone[tier], 0
            while i < len(probes):
                step = width(i)
                batch = probes[i : i + step]
                results += await asyncio.gather(*(_send(client, tier, p, text_only) for p in batch))
                i += step
        i = 0
        while any(i < len(w) for w in together.values()):
            step = width(i)
            sends = [
                _send(client, tier, p, text_only) for tier, w in together.items() for p in w[i : i + step]
            ]
            results += await asyncio.gather(*sends)
            i += step
        admin = {"Authorization": f"Bearer {admin_key}"}
        resp = await client.post("/admin/api/router/refit", headers=admin)
        resp.raise_for_status()
        snapshot: dict[str, Any] = resp.json()
    ok = sum(1 for r in results if r["status"] == 200)
    return {"sent": len(results), "answered": ok, "text_only": sorted(text_only), "router": snapshot}
