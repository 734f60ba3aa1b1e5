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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.media._failure import CORRUPT, TOO_LARGE, UNSUPPORTED, MediaFailure

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

# What is accepted, by Pillow's format name, and the MIME type each is known by.
FORMATS = {
    "JPEG": "image/jpeg",
    "PNG": "image/png",
    "WEBP": "image/webp",
    "GIF": "image/gif",
    "BMP": "image/bmp",
}
_MIME_ALIASES = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg", "image/x-png": "image/png"}


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


def open_checked(data: bytes, max_source_pixels: int, declared_mime: str = "") -> PILImage:
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
    """Decode ``data`` and return it oriented, RGB, within ``max_pixels``, re-encoded."""
    from PIL import Image, ImageOps

    started = time.perf_counter()
    image = open_checked(data, params.max_source_pixels, params.declared_mime)
    fmt = image.format or ""
    width, height = image.size
    try:
        orientation = int(image.getexif().get(0x0112, 1))
    except Exception:  # a broken EXIF block is not worth refusing the image for
        orientation = 1
    # Orientations 5-8 swap width and height; the pixel budget is the same either way.
    goal = target_size(width, height, params.max_pixels)
    try:
        if fmt == "JPEG" and goal != (width, height):
            image.draft("RGB", goal)  # decode at the smallest DCT scale still >= goal
        image.load()
        decoded = time.perf_counter()
        image = ImageOps.exif_transpose(image) or image
        if image.mode != "RGB":
            image = _to_rgb(image)
        goal = target_size(image.width, image.height, params.max_pixels)
        if image.size != goal:
            factor = min(image.width // goal[0], image.height // goal[1])
            if factor >= 2:
                image = image.reduce(factor)  # cheap box shrink to within 2x of the goal
            image = image.resize(goal, Image.Resampling.LANCZOS)
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
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


def _to_rgb(image: PILImage) -> PILImage:
    """RGB, with any transparency flattened onto white."""
    from PIL import Image

    if image.mode in ("RGBA", "LA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")
