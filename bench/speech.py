"""Speech to text: the real-time factor (seconds of audio transcribed per wall second) of Whisper base
(CTranslate2, int8) on this machine, alone and through ``POST /v1/audio/transcriptions``.

Method
------
* Audio: the sentences of ``tests/speech_files.py`` spoken by espeak-ng (American English voice, 150
  words a minute), joined in groups of three into clips of about 5-7 s, 16-bit WAV at 22.05 kHz (the
  gateway decodes and resamples each to 16 kHz in its decode pool). ``--clips`` clips per cell.
* ``raw``: in this process, the tier's own ``Transcriber`` (tiers/speech/) on the clips already
  decoded to 16 kHz float32: the model alone, no HTTP, no decoding.
* ``gw w=N``: a real ``tiergate serve`` child process (no chat tier; keys, limits, the ledger and the
  media cache as configured by default), called with httpx over loopback. ``c1``: one client, requests
  back to back; ``c4``: 4 clients at once. ``speech.workers`` = N transcriptions at once, each on
  ``speech.threads`` = 2 threads (1, the default; ``--workers 1,2`` tries each): with 4 clients and one
  worker the other requests wait for it (and past ``max_waiting`` would be a 429), so c4 shows what the
  bound lets through, not more speed. ``raw`` runs before and after the gateway's rows.
* RTF = audio seconds / wall seconds over the cell (higher is faster; 1.0 is real time); also each
  request's latency (p50, max) and the mean word error of the transcripts against the sentences.
* The machine is shared (2 cores, other engineers' tests): compare within one run.

    flock /tmp/tiergate-heavy.lock .venv/bin/python -m bench.speech [--clips 6] [--workers 1,2]

Prints a table and writes bench/results/speech.json.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.edge import free_port, machine
from gateway.pipeline.endpoints.speech import speech_config
from gateway.settings import load_settings
from tests import speech_files
from tiers.speech import SAMPLE_RATE, SpeechConfig, Transcriber

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "speech.json"


def clips(n: int) -> list[tuple[str, bytes, float]]:
    """(the text, a WAV of it, its seconds): three sentences each."""
    out = []
    sentences = speech_files.SENTENCES
    for i in range(n):
        text = " ".join(sentences[(3 * i + k) % len(sentences)] for k in range(3))
        wav = speech_files.spoken(text)
        with wave.open(io.BytesIO(wav)) as w:
            seconds = w.getnframes() / w.getframerate()
        out.append((text, wav, seconds))
    return out


def at_16k(wav: bytes) -> np.ndarray:
    import av

    with av.open(io.BytesIO(wav)) as c:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        parts = [f.to_ndarray().reshape(-1) for fr in c.decode(audio=0) for f in resampler.resample(fr)]
    return np.concatenate(parts).astype(np.float32)


def raw(audio: list[tuple[str, bytes, float]]) -> dict[str, Any]:
    config = speech_config(SpeechConfig(), load_settings().build_cache_dir)

    async def run() -> dict[str, Any]:
        transcriber = Transcriber(config)
        await transcriber.loaded()
        pcm = [at_16k(wav) for _, wav, _ in audio]
        await transcriber.transcribe(pcm[0])  # warm
        started, took, errors = time.perf_counter(), [], []
        for (text, _, _), samples in zip(audio, pcm, strict=True):
            t = time.perf_counter()
            got = await transcriber.transcribe(samples)
            took.append(time.perf_counter() - t)
            errors.append(speech_files.word_error(text, got.text))
        wall = time.perf_counter() - started
        await transcriber.aclose()
        return cell("raw", 1, audio, wall, took, errors)

    return asyncio.run(run())


def cell(
    name: str,
    clients: int,
    audio: list[tuple[str, bytes, float]],
    wall: float,
    took: list[float],
    errors: list[float],
) -> dict[str, Any]:
    seconds = sum(s for _, _, s in audio)
    return {
        "path": name,
        "clients": clients,
        "clips": len(audio),
        "audio_s": round(seconds, 2),
        "wall_s": round(wall, 2),
        "rtf": round(seconds / wall, 3),
        "latency_p50_s": round(statistics.median(took), 2),
        "latency_max_s": round(max(took), 2),
        "word_error": round(statistics.mean(errors), 3),
    }


def gateway(
    audio: list[tuple[str, bytes, float]], clients_list: list[int], workers: int
) -> list[dict[str, Any]]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "tiergate.toml"
        config.write_text(
            f'data_dir = "{tmp}/data"\n[edge]\nenabled = false\n[cloud]\nenabled = false\n'
            f"[embedding]\nenabled = false\n[speech]\npreload = true\nworkers = {workers}\nmax_waiting = 16\n"
        )
        log = (Path(tmp) / "gateway.log").open("wb")
        tiergate = str(Path(sys.executable).parent / "tiergate")
        process = subprocess.Popen(
            [tiergate, "serve", "--config", str(config), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while True:
                try:
                    if httpx.get(f"{url}/healthz").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or process.poll() is not None:
                    raise SystemExit(
                        f"the gateway did not start: {(Path(tmp) / 'gateway.log').read_text()[-2000:]}"
                    )
                time.sleep(0.3)
            key = json.loads((Path(tmp) / "data" / "initial-credentials.json").read_text())["tenant_key"]
            headers = {"Authorization": f"Bearer {key}"}

            def one(item: tuple[str, bytes, float]) -> tuple[float, float]:
                text, wav, _ = item
                t = time.perf_counter()
                reply = httpx.post(
                    f"{url}/v1/audio/transcriptions",
                    data={"model": "whisper-1"},
                    files={"file": ("a.wav", wav, "audio/wav")},
                    headers=headers,
                    timeout=600,
                )
                reply.raise_for_status()
                return time.perf_counter() - t, speech_files.word_error(text, reply.json()["text"])

            one(audio[0])  # warm: the decode pool's workers, the model's first call
            out = []
            for clients in clients_list:
                started = time.perf_counter()
                with ThreadPoolExecutor(clients) as pool:
                    done = list(pool.map(one, audio))
                wall = time.perf_counter() - started
                out.append(cell("gateway", clients, audio, wall, [d[0] for d in done], [d[1] for d in done]))
            return out
        finally:
            process.terminate()
            process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clips", type=int, default=6)
    parser.add_argument("--workers", default="1", help="speech.workers to try, comma-separated (e.g. 1,2)")
    args = parser.parse_args()
    audio = clips(args.clips)
    rows = [raw(audio)]
    for workers in (int(w) for w in args.workers.split(",")):
        for row in gateway(audio, [1, 4], workers):
            rows.append({**row, "path": f"gw w={workers}", "workers": workers})
    rows.append(raw(audio))  # again: the machine's load moves; the gateway's rows sit between two
    head = ("path", "clients", "audio s", "wall s", "RTF", "p50 s", "max s", "WER")
    print(f"{head[0]:9} " + " ".join(f"{h:>7}" for h in head[1:]))
    for r in rows:
        print(
            f"{r['path']:9} {r['clients']:>7} {r['audio_s']:>7} {r['wall_s']:>7} {r['rtf']:>7} "
            f"{r['latency_p50_s']:>7} {r['latency_max_s']:>7} {r['word_error']:>7}"
        )
    RESULTS.write_text(
        json.dumps(
            {
                "machine": machine(),
                "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "model": "whisper-base (CTranslate2 int8, 2 threads, beam 5)",
                "workers": args.workers,
                "load_average": list(os.getloadavg()),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
