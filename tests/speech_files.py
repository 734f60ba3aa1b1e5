"""Real speech for the speech-to-text tests and bench: sentences spoken by espeak-ng (Debian's package),
as WAV, MP3 or OGG (re-encoded with PyAV), and the word error rate of a transcript."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import av
import numpy as np

ESPEAK = shutil.which("espeak-ng")

SENTENCES = (
    "The weather is nice today.",
    "Please open the window.",
    "I would like a cup of coffee.",
    "The train leaves early in the morning.",
    "She reads a book every night.",
    "We need to buy some milk and bread.",
    "The children are playing in the park.",
    "My phone battery is almost empty.",
    "Turn left at the next street.",
    "The meeting starts in a few minutes.",
    "He plays the guitar very well.",
    "Can you send me the report?",
    "The store closes early on Sunday.",
    "Fresh water is good for you.",
    "The cat is sleeping on the sofa.",
    "I forgot my keys at home.",
    "Our team won the game last week.",
    "The doctor will see you now.",
    "Please write your name on the form.",
    "The sun rises in the east.",
    "Thank you for your help.",
    "The price of gold went up again.",
)


def spoken(text: str, speed: int = 150) -> bytes:
    """``text`` spoken by espeak-ng (its American English voice): a 22.05 kHz mono 16-bit WAV."""
    assert ESPEAK is not None, "espeak-ng is not installed (scripts/setup.sh)"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "speech.wav"
        subprocess.run(
            [ESPEAK, "-v", "en-us", "-s", str(speed), "-w", str(out), text], check=True, capture_output=True
        )
        return out.read_bytes()


def encoded(wav: bytes, fmt: str) -> bytes:
    """A WAV re-encoded as ``fmt``: "mp3" (LAME) or "ogg" (Vorbis, else Opus); "wav" as it is."""
    if fmt == "wav":
        return wav
    codec, rate = {"mp3": ("libmp3lame", 22050), "ogg": ("libvorbis", 22050)}[fmt]
    if fmt == "ogg" and codec not in av.codecs_available:
        codec, rate = "libopus", 48000
    out = io.BytesIO()
    with (
        av.open(io.BytesIO(wav)) as source,
        av.open(out, "w", format="mp3" if fmt == "mp3" else "ogg") as sink,
    ):
        stream = sink.add_stream(codec, rate=rate)
        stream.layout = "mono"
        resampler = av.AudioResampler(format="fltp" if fmt != "mp3" else "s16p", layout="mono", rate=rate)
        for frame in source.decode(audio=0):
            for again in resampler.resample(frame):
                for packet in stream.encode(again):
                    sink.mux(packet)
        for packet in stream.encode():
            sink.mux(packet)
    return out.getvalue()


def words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower()).split()


def word_error(reference: str, hypothesis: str) -> float:
    """(substitutions + deletions + insertions) / words of the reference: the edit distance over words."""
    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        before, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            before, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, before + (r != h))
    return row[-1] / max(1, len(ref))


def talking_video(wav: bytes, fps: int = 5, size: tuple[int, int] = (160, 120)) -> bytes:
    """An MP4 of grey frames as long as ``wav``, with ``wav`` as its AAC audio track."""
    out = io.BytesIO()
    with av.open(io.BytesIO(wav)) as source, av.open(out, "w", format="mp4") as sink:
        pcm = [f for f in source.decode(audio=0)]
        seconds = sum(f.samples for f in pcm) / pcm[0].sample_rate
        video = sink.add_stream("mpeg4", rate=fps)
        video.width, video.height = size
        video.pix_fmt = "yuv420p"
        track = sink.add_stream("aac", rate=22050)
        track.layout = "mono"
        for i in range(max(1, int(seconds * fps))):
            pixels = np.full((size[1], size[0], 3), 40 + i % 100, np.uint8)
            for packet in video.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                sink.mux(packet)
        for packet in video.encode():
            sink.mux(packet)
        resampler = av.AudioResampler(format="fltp", layout="mono", rate=22050)
        for frame in pcm:
            for again in resampler.resample(frame):
                for packet in track.encode(again):
                    sink.mux(packet)
        for packet in track.encode():
            sink.mux(packet)
    return out.getvalue()
