"""Images with Pillow: bounded, oriented, RGB, shrunk on load, re-encoded.

A JPEG is opened in *draft* mode (libjpeg's DCT scaling decodes it at 1/2, 1/4 or 1/8 of its
size directly) and other formats are shrunk with ``Image.reduce`` before the final resample,
so a 12-megapixel photo is never fully decoded just to be made small.
"""

from __future__ import annotations

import io
import math
import time
import warnings
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.media import _png
from gateway.media._failure import CORRUPT, TOO_LARGE, UNSUPPORTED, MediaFailure

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage
    from PIL.ImageFile import ImageFile

# What is accepted, by Pillow's format name, and the MIME type each is known by.
FORMATS = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "WEBP": "image/webp",
    "GIF": "image/gif",
    "BMP": "image/bmp",
}
_MIME_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "image/x-png": "image/png"}
# EXIF orientation -> the turn that shows the picture upright (Pillow's Image.Transpose values,
# as ImageOps.exif_transpose applies them).
_TURNS = {2: 0, 3: 3, 4: 1, 5: 5, 6: 4, 7: 6, 8: 2}


@dataclass(frozen=True, slots=True)
class ImageParams:
    max_source_pixels: int
    max_pixels: int
    jpeg_quality: int = 90
    declared_mime: str = ""  # from a data: URI or Content-Type; checked against the content


@dataclass(frozen=True, slots=True)
class ImageResult:
    data: bytes  # the normalised image, JPEG (from JPEG sources) or PNG
    mime: str
    width: int
    height: int
    original_width: int
    original_height: int
    original_format: str  # Pillow's name: JPEG, PNG, ...
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def aspect_ratio(self) -> float:
        return self.original_width / self.original_height


def target_size(width: int, height: int, max_pixels: int) -> tuple[int, int]:
    """The largest size of the same aspect ratio within ``max_pixels`` (never enlarged)."""
    if width * height <= max_pixels:
        return width, height
    scale = math.sqrt(max_pixels / (width * height))
    return max(1, int(width * scale)), max(1, int(height * scale))


def peak_bytes(width: int, height: int, fmt: str, max_pixels: int, turned: bool = False) -> int:
    """The most memory one :func:`normalise` holds at once beyond the file, from the copies it makes.

    Pillow keeps RGB, RGBA and LA images at 4 bytes a pixel. A PNG shrunk by 2 or more holds one band
    of ``factor`` rows in up to eight forms at once (filtered, stored in pieces and joined,
    unfiltered, its bytes, unpacked, flattened, reduced), never the picture; a JPEG is decoded at
    its DCT scale (at most 1/8); other formats (WebP, GIF, BMP) are decoded whole and flattened.
    Then the reduced image, the resampled one, the turned one (EXIF 2-8) and the encoded file (at
    most 3 bytes a pixel) may live at once. The decode pool holds at most ``media.workers`` of
    these, each beside its file (twice while it is unpickled).
    """
    goal = target_size(width, height, max_pixels)
    if fmt == "JPEG" and (width, height) != goal:
        scale = max(s for s in (1, 2, 4, 8) if s == 1 or (width // s >= goal[0] and height // s >= goal[1]))
        width, height = -(-width // scale), -(-height // scale)
        goal = target_size(width, height, max_pixels)
    factor = min(width // goal[0], height // goal[1])
    banded = fmt == "PNG" and factor >= 2
    decoded = 8 * factor * width * 4 if banded else 2 * width * height * 4
    reduced = -(-width // factor) * -(-height // factor) * 4 if factor >= 2 else 0
    final = goal[0] * goal[1]
    return decoded + reduced + final * 4 * (2 if turned else 1) + final * 3


def open_checked(data: bytes, max_source_pixels: int, declared_mime: str = "") -> ImageFile:
    """Open (header only) and check format, declared type and size; the pixels are not read yet."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise MediaFailure(CORRUPT, "the image is empty (zero bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=list(FORMATS))
    except UnidentifiedImageError as exc:
        raise MediaFailure(UNSUPPORTED, f"not an image in a supported format ({', '.join(FORMATS)})") from exc
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaFailure(TOO_LARGE, f"the image is too large to decode: {exc}") from exc
    except (OSError, SyntaxError, ValueError) as exc:
        raise MediaFailure(CORRUPT, f"the image cannot be read: {exc}") from exc
    mime = FORMATS[image.format or ""]
    declared = _MIME_ALIASES.get(declared_mime, declared_mime)
    if declared and declared != mime and declared != "application/octet-stream":
        raise MediaFailure(UNSUPPORTED, f"declared as {declared_mime} but the data is {mime}")
    width, height = image.size
    if width * height > max_source_pixels:
        raise MediaFailure(
            TOO_LARGE,
            f"the image is {width}x{height} = {width * height} pixels; at most {max_source_pixels} are "
            "decoded (setting media.image.max_source_pixels)",
        )
    return image


def normalise(data: bytes, params: ImageParams) -> ImageResult:
    """Decode ``data`` and return it oriented, RGB, within ``max_pixels``, re-encoded.

    Shrinking comes first, while decoding where the format allows (JPEG: libjpeg's DCT scaling;
    PNG: band by band, :mod:`gateway.media._png`), then the flattening to RGB, the final resample
    and, only when the EXIF tag asks for it, the turn: each on the smallest image it can be done to.
    """
    from PIL import Image

    started = time.perf_counter()
    opened = open_checked(data, params.max_source_pixels, params.declared_mime)
    image: PILImage = opened
    fmt = image.format or ""
    width, height = image.size
    orientation = _orientation(image, data)
    goal = target_size(width, height, params.max_pixels)
    try:
        if fmt == "JPEG" and goal != (width, height):
            image.draft("RGB", goal)  # decode at the smallest DCT scale still >= goal
        goal = target_size(image.width, image.height, params.max_pixels)
        factor = min(image.width // goal[0], image.height // goal[1])
        if fmt == "PNG" and factor >= 2:
            image = _png.reduced(data, opened, factor, flatten)
        else:
            image.load()
            image = flatten(image)
            if factor >= 2:
                image = image.reduce(factor)  # cheap box shrink to within 2x of the goal
        decoded = time.perf_counter()
        if image.size != goal:
            image = image.resize(goal, Image.Resampling.LANCZOS)
        if orientation in _TURNS:
            image = image.transpose(Image.Transpose(_TURNS[orientation]))
    except (OSError, SyntaxError, ValueError, zlib.error, Image.DecompressionBombError) as exc:
        raise MediaFailure(CORRUPT, f"the image cannot be decoded: {exc}") from exc
    resized = time.perf_counter()
    out = io.BytesIO()
    if fmt == "JPEG":
        image.save(out, "JPEG", quality=params.jpeg_quality)
        mime = "image/jpeg"
    else:
        image.save(out, "PNG", compress_level=1)
        mime = "image/png"
    done = time.perf_counter()
    # As the viewer sees it: EXIF orientations 5-8 swap width and height.
    original = (height, width) if orientation in (5, 6, 7, 8) else (width, height)
    return ImageResult(
        data=out.getvalue(),
        mime=mime,
        width=image.width,
        height=image.height,
        original_width=original[0],
        original_height=original[1],
        original_format=fmt,
        timings={"decode_s": decoded - started, "resize_s": resized - decoded, "encode_s": done - resized},
    )


def _orientation(image: PILImage, data: bytes) -> int:
    """The EXIF orientation tag (1: upright), read without decoding the pixels."""
    from PIL import Image

    try:
        if image.format == "PNG":
            tags = Image.Exif()
            tags.load(image.info.get("exif") or _png.exif(data))
            return int(tags.get(0x0112, 1))
        return int(image.getexif().get(0x0112, 1))
    except Exception:  # a broken EXIF block is not worth refusing the image for
        return 1


def flatten(image: PILImage) -> PILImage:
    """RGB, with any transparency flattened onto white; an RGB image is returned as it is.

    The alpha band is the paste's mask as it is (no copy of it), and a palette image is expanded
    only when it has transparency to flatten.
    """
    from PIL import Image

    if image.mode == "RGB":
        return image
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA"):
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image)
        return background
    return image.convert("RGB")
