"""Real media files for the tests, made on the spot with Pillow and PyAV."""

from __future__ import annotations

import base64
import io
import struct
import zlib
from fractions import Fraction

import av
import numpy as np
from PIL import Image


def jpeg(width: int = 640, height: int = 480, *, orientation: int | None = None, quality: int = 90) -> bytes:
    """A JPEG with a gradient (not one flat colour, so sizes and crops are visible)."""
    x = np.linspace(0, 255, width, dtype=np.uint8)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.uint8)[:, None, None]
    pixels = np.concatenate(
        [
            np.broadcast_to(x, (height, width, 1)),
            np.broadcast_to(y, (height, width, 1)),
            np.full((height, width, 1), 90, np.uint8),
        ],
        axis=2,
    )
    image = Image.fromarray(np.ascontiguousarray(pixels), "RGB")
    out = io.BytesIO()
    exif = Image.Exif()
    if orientation is not None:
        exif[0x0112] = orientation
    image.save(out, "JPEG", quality=quality, exif=exif.tobytes())
    return out.getvalue()


def png(width: int = 64, height: int = 48, mode: str = "RGBA") -> bytes:
    image = Image.new(mode, (width, height), (200, 30, 30, 128) if mode == "RGBA" else (200, 30, 30))
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def png_header_only(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` (a decompression bomb's header) over tiny data."""
    out = io.BytesIO()
    Image.new("1", (width, height)).save(out, "PNG")  # 1-bit zeros compress to almost nothing
    return out.getvalue()


def video(
    seconds: float = 4.0,
    fps: int = 25,
    size: tuple[int, int] = (320, 240),
    *,
    gop: int = 25,
    codec: str = "mpeg4",
    container: str = "mp4",
    audio: bool = False,
) -> bytes:
    """A clip whose frames change brightness over time; an AAC tone track with ``audio``."""
    out = io.BytesIO()
    with av.open(out, "w", format=container) as c:
        stream = c.add_stream(codec, rate=fps)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.codec_context.gop_size = gop
        track = c.add_stream("aac", rate=16000) if audio else None
        if track is not None:
            track.layout = "mono"
        for i in range(int(seconds * fps)):
            pixels = np.full((size[1], size[0], 3), (i * 7) % 256, np.uint8)
            pixels[:, : size[0] // 4, 0] = 255 - (i * 7) % 256
            for packet in stream.encode(av.VideoFrame.from_ndarray(pixels, format="rgb24")):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
        if track is not None:
            for frame in _tone_frames(seconds, 16000, "s16", "mono"):
                for packet in track.encode(frame):
                    c.mux(packet)
            for packet in track.encode():
                c.mux(packet)
    return out.getvalue()


def _tone_frames(seconds: float, rate: int, fmt: str, layout: str, chunk: int = 1024) -> list[av.AudioFrame]:
    t = np.arange(int(seconds * rate)) / rate
    wave = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)
    channels = 2 if layout == "stereo" else 1
    frames = []
    for k in range(0, len(wave), chunk):
        block = np.repeat(wave[None, k : k + chunk], channels, axis=0)
        if fmt == "s16":
            data = block.T.reshape(1, -1) if channels > 1 else block
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(data), format="s16", layout=layout)
        else:
            frame = av.AudioFrame.from_ndarray(
                (block / 32768).astype(np.float32), format="fltp", layout=layout
            )
        frame.sample_rate = rate
        frame.pts = k
        frame.time_base = Fraction(1, rate)
        frames.append(frame)
    return frames


def audio(seconds: float = 2.0, *, fmt: str = "mp3", rate: int = 44100, stereo: bool = True) -> bytes:
    """A 440 Hz tone in ``fmt``: mp3, ogg (vorbis... here opus), flac or wav."""
    codec, container, sample_fmt = {
        "mp3": ("libmp3lame", "mp3", "fltp"),
        "ogg": ("libopus", "ogg", "fltp"),
        "flac": ("flac", "flac", "s16"),
        "wav": ("pcm_s16le", "wav", "s16"),
    }[fmt]
    if codec == "libopus":
        rate = 48000
    layout = "stereo" if stereo else "mono"
    out = io.BytesIO()
    with av.open(out, "w", format=container) as c:
        stream = c.add_stream(codec, rate=rate)
        stream.layout = layout
        for frame in _tone_frames(seconds, rate, sample_fmt if sample_fmt == "s16" else "fltp", layout):
            for packet in stream.encode(frame):
                c.mux(packet)
        for packet in stream.encode():
            c.mux(packet)
    return out.getvalue()


def data_uri(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# -- PNGs written byte by byte: Pillow writes neither 16-bit RGB, nor interlaced, nor huge ones cheaply --

ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def _filtered(rows: np.ndarray, bpp: int) -> bytes:
    """Rows (height x bytes) filtered with each of PNG's five filters in turn (row i: filter i % 5)."""
    out = bytearray()
    prev = np.zeros(rows.shape[1], np.int16)
    for i, row in enumerate(rows.astype(np.int16)):
        a = np.concatenate([np.zeros(bpp, np.int16), row[:-bpp]])
        c = np.concatenate([np.zeros(bpp, np.int16), prev[:-bpp]])
        predictors = [0 * row, a, prev, (a + prev) // 2]
        p = a + prev - c
        pa, pb, pc = abs(p - a), abs(p - prev), abs(p - c)
        predictors.append(np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, prev, c)))
        out.append(i % 5)
        out += ((row - predictors[i % 5]) % 256).astype(np.uint8).tobytes()
        prev = row
    return bytes(out)


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _png_file(
    width: int, height: int, depth: int, colour: int, idat: bytes, extra: bytes, interlace: int
) -> bytes:
    head = struct.pack(">IIBBBBB", width, height, depth, colour, 0, 0, interlace)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", head) + extra + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


def png_made(
    pixels: np.ndarray, depth: int, colour: int, *, interlace: bool = False, plte: bytes = b""
) -> bytes:
    """``pixels`` (height x width x bytes per pixel, samples big-endian) as a PNG using every filter."""
    height, width, bpp = pixels.shape
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    data = b"".join(
        _filtered(sub.reshape(sub.shape[0], -1), bpp)
        for x0, y0, dx, dy in passes
        if (sub := pixels[y0::dy, x0::dx]).size
    )
    extra = _chunk(b"PLTE", plte) if plte else b""
    return _png_file(width, height, depth, colour, zlib.compress(data), extra, int(interlace))


def png_marked(width: int, height: int, mode: str = "RGBA", *, orientation: int | None = None) -> bytes:
    """A large PNG that compresses to almost nothing (each row repeats the one above: filter Up):
    blue, with a red block in its top-left corner (a tenth of each side), opaque; written a row at a time.
    """
    channels = {"RGB": 3, "RGBA": 4}[mode]
    blue, red = bytes([0, 0, 255, 255][:channels]), bytes([255, 0, 0, 255][:channels])
    mark = width // 10
    marked = b"\0" + red * mark + blue * (width - mark)
    plain = b"\0" + blue * width
    up = b"\2" + bytes(width * channels)
    pack = zlib.compressobj(9)
    parts = [pack.compress(marked)]
    for y in range(1, height):
        parts.append(pack.compress(plain if y == height // 10 else up))
    parts.append(pack.flush())
    extra = b""
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        extra = _chunk(b"eXIf", exif.tobytes())
    return _png_file(width, height, 8, {"RGB": 2, "RGBA": 6}[mode], b"".join(parts), extra, 0)
