"""A large PNG decoded a band of rows at a time, each band box-reduced as soon as it is decoded.

Pillow decodes a PNG whole: a 6300 x 6300 RGBA picture of 150 KiB is 151 MiB once loaded, before
any shrinking. Here the image data is inflated a band of ``factor`` rows at a time (a bounded
``zlib`` read, so a zlib bomb is never inflated beyond the rows the header promises); each band
goes through Pillow's own PNG decoder (its C unfilter) as a small PNG stream of its own, preceded
by the band's previous row, already unfiltered, which the Up, Average and Paeth filters of the
band's first row refer to. The band is then unpacked to the picture's mode, given its palette and
transparency, flattened to RGB (``flatten``) and reduced to one row of the result, exactly as
``Image.reduce(factor)`` of the whole image would. The worker holds one band, the reduced image
and the file, not the picture.

To get the previous row back byte for byte, each band is decoded as an 8-bit image whose pixels
are as wide as the picture's (a filter works on bytes, with the pixel's width as its offset): 16-bit
RGB and RGBA have no such Pillow mode, so their bands are decoded twice, high and low bytes.
An interlaced picture (Adam7) is reduced from its last pass alone (its odd rows, every column):
passes 1-6 are inflated and skipped.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gateway.media._failure import CORRUPT, MediaFailure

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage
    from PIL.ImageFile import ImageFile

_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # by PNG colour type
# By bytes per pixel: the 8-bit mode whose raw bytes are the row's, and the rawmodes to read it with.
_EXACT = {
    1: ("L", ("L",)),
    2: ("LA", ("LA",)),
    3: ("RGB", ("RGB",)),
    4: ("RGBA", ("RGBA",)),
    6: ("RGB", ("RGB;16B", "RGB;16L")),
    8: ("RGBA", ("RGBA;16B", "RGBA;16L")),
}
# Adam7's passes before the last: (x0, y0, dx, dy).
_FIRST_PASSES = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2))


@dataclass(frozen=True, slots=True)
class Header:
    width: int
    height: int
    bits: int  # per pixel
    interlaced: bool

    @property
    def row_bytes(self) -> int:
        return (self.width * self.bits + 7) // 8

    @property
    def pixel_bytes(self) -> int:  # the filters' offset
        return max(1, self.bits // 8)


def header(data: bytes) -> Header:
    width, height, depth, colour, _, _, interlace = struct.unpack_from(">IIBBBBB", data, 16)
    return Header(width, height, depth * _CHANNELS.get(colour, 1), interlace == 1)


def _chunks(data: bytes, wanted: bytes) -> Iterator[memoryview]:
    view, pos = memoryview(data), 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack_from(">I4s", data, pos)
        if kind == wanted:
            yield view[pos + 8 : pos + 8 + length]
        elif kind == b"IEND":
            return
        pos += 12 + length


def exif(data: bytes) -> bytes:
    """The eXIf chunk's bytes (empty if none), found without decoding: Pillow's ``getexif`` loads a
    PNG whole to look for one after the pixels."""
    return bytes(next(_chunks(data, b"eXIf"), b""))


class _Inflater:
    """The image data's zlib stream, read a given number of bytes at a time."""

    def __init__(self, data: bytes) -> None:
        self._chunks = _chunks(data, b"IDAT")
        self._zlib = zlib.decompressobj()

    def read(self, size: int) -> bytearray:
        out = bytearray()
        while len(out) < size and not self._zlib.eof:
            source = self._zlib.unconsumed_tail or next(self._chunks, None)
            if source is None:
                break
            out += self._zlib.decompress(source, size - len(out))
        if len(out) < size:
            raise MediaFailure(CORRUPT, "the image cannot be decoded: its pixel data ends early")
        return out


def _unfiltered(previous: bytes, band: bytearray, rows: int, head: Header) -> bytes:
    """``rows`` filtered rows to their raw bytes, behind ``previous`` (the raw row above them)."""
    from PIL import Image

    mode, rawmodes = _EXACT[head.pixel_bytes]
    store = zlib.compressobj(0)  # stored blocks: a copy, not a compression
    stream = b"".join((store.compress(b"\0"), store.compress(previous), store.compress(band), store.flush()))
    del band  # the caller's is its only other reference
    size = (head.row_bytes // head.pixel_bytes, rows + 1)
    halves = [Image.frombytes(mode, size, stream, "zip", raw).tobytes("raw", mode) for raw in rawmodes]
    if len(halves) == 1:
        return halves[0]
    raw = bytearray(2 * len(halves[0]))
    raw[0::2], raw[1::2] = halves
    return bytes(raw)


def reduced(data: bytes, source: ImageFile, factor: int, flatten: Callable[[PILImage], PILImage]) -> PILImage:
    """``source`` (opened, not loaded) decoded band by band, flattened, and reduced by ``factor``."""
    from PIL import Image

    head = header(data)
    rawmode = str(source.tile[0].args)
    width, rows, factors = head.width, head.height, (factor, factor)
    inflate = _Inflater(data)
    if head.interlaced:  # the last pass alone: every column of the odd rows
        for x0, y0, dx, dy in _FIRST_PASSES:
            w, h = -(-max(0, width - x0) // dx), -(-max(0, rows - y0) // dy)
            if w and h:
                inflate.read(h * (1 + (w * head.bits + 7) // 8))
        rows, factors = rows // 2, (factor, max(1, factor // 2))
    row_bytes = head.row_bytes
    out = Image.new("RGB", (-(-width // factors[0]), -(-rows // factors[1])))
    previous = bytes(row_bytes)
    for top in range(0, rows, factors[1]):
        n = min(factors[1], rows - top)
        raw = _unfiltered(previous, inflate.read(n * (1 + row_bytes)), n, head)
        previous = raw[-row_bytes:]
        band = Image.frombytes(source.mode, (width, n), memoryview(raw)[row_bytes:], "raw", rawmode)
        if source.palette is not None:
            band.putpalette(source.palette)
        if "transparency" in source.info:
            band.info["transparency"] = source.info["transparency"]
        out.paste(flatten(band).reduce(factors), (0, top // factors[1]))
    return out
