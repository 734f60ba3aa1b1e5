"""Media preprocessing benchmark: tiergate's decoders against the naive way, in the same run.

Method
------
All in this process, one thread, on media made here (so the run needs no files):

- **image**: photo-like JPEGs (a gradient plus noise, quality 90) of 12 and 24 megapixels,
  normalised to the default budget (``media.image.max_pixels`` 1 MP) and to the embedded VLM's
  (``cloud.limits.max_image_pixels`` 0.26 MP). *tiergate* is ``gateway.media.image.normalise``
  (JPEG draft mode: libjpeg decodes at 1/2, 1/4 or 1/8 scale; then ``reduce`` and a Lanczos
  resample; EXIF orientation; re-encoded as JPEG). *naive* is the same output made the usual way:
  ``Image.open`` + full ``load`` + ``exif_transpose`` + ``convert("RGB")`` + Lanczos ``resize`` +
  the same JPEG encode. Both produce the same size.
- **video**: a 30 s clip (640x360, 25 fps, MPEG-4 part 2, a keyframe every 2 s), sampled at
  1 fps, at most 8 frames. *tiergate* is ``gateway.media.video.normalise`` (seek to the keyframe
  before each sample time, decode forward to it); *decode-all* decodes every frame and keeps
  those nearest the same times, then the same resize and encode.
- **audio**: 60 s of stereo 44.1 kHz (48 kHz for Opus) as MP3, Ogg/Opus, FLAC and WAV, decoded,
  downmixed and resampled to 16 kHz mono WAV by ``gateway.media.audio.normalise``: seconds of
  audio per second of wall time.

Each measurement is the median of ``--repeats`` runs after one warm-up run. The table is printed
and ``bench/results/preprocess.json`` keeps the numbers and the settings.
Run: ``.venv/bin/python bench/preprocess.py`` (the 2-core machine is shared; ±20%).
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
from PIL import Image, ImageOps

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gateway.media import audio, image, video  # noqa: E402
from tests import media_files  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "preprocess.json"


def photo(width: int, height: int) -> bytes:
    rng = np.random.default_rng(0)
    x = np.linspace(0, 200, width, dtype=np.float32)[None, :]
    y = np.linspace(0, 200, height, dtype=np.float32)[:, None]
    base = np.stack([x + 0 * y, y + 0 * x, (x + y) / 2], axis=2)
    noisy = np.clip(base + rng.normal(0, 18, (height, width, 3)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(noisy, "RGB").save(out, "JPEG", quality=90)
    return out.getvalue()


def naive_image(data: bytes, max_pixels: int, quality: int = 90) -> tuple[int, int]:
    im = Image.open(io.BytesIO(data))
    im.load()
    im = ImageOps.exif_transpose(im) or im
    im = im.convert("RGB")
    im = im.resize(image.target_size(im.width, im.height, max_pixels), Image.Resampling.LANCZOS)
    im.save(io.BytesIO(), "JPEG", quality=quality)
    return im.size


def decode_all(data: bytes, params: video.VideoParams) -> int:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        seconds = float(stream.duration * stream.time_base)
        times = video.sample_times(seconds, params.sample_fps, params.max_frames)
        best: dict[int, tuple[float, Any]] = {}
        count = 0
        for frame in container.decode(stream):
            count += 1
            for i, t in enumerate(times):
                gap = abs(frame.time - t)
                if i not in best or gap < best[i][0]:
                    best[i] = (gap, frame.to_image())
        for _, picture in best.values():
            goal = image.target_size(picture.width, picture.height, params.frame_max_pixels)
            picture.resize(goal, Image.Resampling.BILINEAR).save(io.BytesIO(), "JPEG", quality=85)
    return count


def median_s(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    result = fn()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []

    for mp, (w, h) in (("12 MP", (4000, 3000)), ("24 MP", (6000, 4000))):
        data = photo(w, h)
        for budget in (1_048_576, 262_144):
            params = image.ImageParams(max_source_pixels=50_000_000, max_pixels=budget)
            ours, result = median_s(lambda d=data, p=params: image.normalise(d, p), args.repeats)
            naive, size = median_s(lambda d=data, b=budget: naive_image(d, b), args.repeats)
            assert size == (result.width, result.height)
            rows.append(
                {
                    "what": f"image {mp} JPEG -> {result.width}x{result.height}",
                    "tiergate_ms": ours * 1000,
                    "baseline": "full decode + resize",
                    "baseline_ms": naive * 1000,
                    "speedup": naive / ours,
                    "input_bytes": len(data),
                }
            )

    clip = media_files.video(30.0, fps=25, size=(640, 360), gop=50)
    vparams = video.VideoParams(sample_fps=1.0, max_frames=8, max_seconds=600, frame_max_pixels=65_536)
    ours, vresult = median_s(lambda: video.normalise(clip, vparams), args.repeats)
    everything, all_frames = median_s(lambda: decode_all(clip, vparams), args.repeats)
    rows.append(
        {
            "what": f"video 30 s 640x360 25 fps -> {len(vresult.frames)} frames",
            "tiergate_ms": ours * 1000,
            "baseline": "decode every frame",
            "baseline_ms": everything * 1000,
            "speedup": everything / ours,
            "frames_decoded": vresult.decoded_frames,
            "baseline_frames_decoded": all_frames,
        }
    )

    aparams = audio.AudioParams(sample_rate=16_000, max_seconds=600)
    for fmt in ("mp3", "ogg", "flac", "wav"):
        clip_bytes = media_files.audio(60.0, fmt=fmt)
        took, aresult = median_s(lambda c=clip_bytes: audio.normalise(c, aparams), args.repeats)
        rows.append(
            {
                "what": f"audio 60 s stereo {fmt} -> 16 kHz mono",
                "tiergate_ms": took * 1000,
                "audio_seconds_per_s": aresult.seconds / took,
            }
        )

    print(f"{'what':48} {'tiergate ms':>12} {'baseline ms':>12} {'speedup':>8}  note")
    for row in rows:
        base = f"{row['baseline_ms']:12.1f}" if "baseline_ms" in row else f"{'':12}"
        speed = f"{row['speedup']:7.1f}x" if "speedup" in row else f"{'':8}"
        note = row.get("baseline", "")
        if "frames_decoded" in row:
            note += f" ({row['frames_decoded']} vs {row['baseline_frames_decoded']} frames decoded)"
        if "audio_seconds_per_s" in row:
            note = f"{row['audio_seconds_per_s']:.0f}x real time"
        print(f"{row['what']:48} {row['tiergate_ms']:12.1f} {base} {speed}  {note}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "rows": rows,
                "repeats": args.repeats,
                "python": platform.python_version(),
                "pillow": Image.__version__,
                "pyav": av.__version__,
                "machine": platform.processor() or platform.machine(),
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
