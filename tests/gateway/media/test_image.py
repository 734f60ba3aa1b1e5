"""Images: shrunk on load (draft mode), oriented, RGB, bounded; bad ones refused with the reason."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from gateway.media import image
from gateway.media._failure import CORRUPT, TOO_LARGE, UNSUPPORTED, MediaFailure
from tests import media_files

PARAMS = image.ImageParams(max_source_pixels=40_000_000, max_pixels=262_144)


def _open(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


def test_a_large_jpeg_is_shrunk_to_the_pixel_budget_keeping_its_aspect_ratio() -> None:
    result = image.normalise(media_files.jpeg(4000, 3000), PARAMS)
    assert result.pixels <= 262_144 and result.pixels > 0.95 * 262_144
    assert abs(result.width / result.height - 4 / 3) < 0.01
    assert (result.original_width, result.original_height, result.original_format) == (4000, 3000, "JPEG")
    out = _open(result.data)
    assert out.format == "JPEG" and out.mode == "RGB" and out.size == (result.width, result.height)


def test_draft_mode_decodes_a_large_jpeg_at_a_reduced_scale() -> None:
    data = media_files.jpeg(4000, 3000)
    im = _open(data)
    im.draft("RGB", image.target_size(4000, 3000, PARAMS.max_pixels))
    assert im.size[0] <= 1000  # libjpeg decodes at 1/4 (or smaller), never the full 12 MP
    im.load()


def test_a_small_image_is_not_enlarged() -> None:
    result = image.normalise(media_files.jpeg(200, 100), PARAMS)
    assert (result.width, result.height) == (200, 100)


def test_exif_orientation_is_applied() -> None:
    # Orientation 6: stored landscape, shown rotated 90 degrees (portrait).
    result = image.normalise(media_files.jpeg(400, 200, orientation=6), PARAMS)
    assert (result.width, result.height) == (200, 400)
    assert (result.original_width, result.original_height) == (200, 400)


def test_png_with_alpha_becomes_rgb_png() -> None:
    result = image.normalise(media_files.png(64, 48, "RGBA"), PARAMS)
    out = _open(result.data)
    assert result.mime == "image/png" and out.mode == "RGB"


@pytest.mark.parametrize(
    ("data", "kind", "words"),
    [
        (b"", CORRUPT, "empty"),
        (b"this is not an image at all", UNSUPPORTED, "supported format"),
        (media_files.jpeg(640, 480)[:3000], CORRUPT, "decoded"),  # truncated
        (media_files.png_header_only(20_000, 20_000), TOO_LARGE, "pixels"),  # a bomb's header
    ],
    ids=["zero-length", "not-an-image", "truncated", "bomb"],
)
def test_bad_images_are_refused_with_a_reason(data: bytes, kind: str, words: str) -> None:
    with pytest.raises(MediaFailure) as info:
        image.normalise(data, PARAMS)
    assert info.value.kind == kind and words in info.value.reason


def test_a_declared_type_that_does_not_match_the_data_is_refused() -> None:
    params = image.ImageParams(40_000_000, 262_144, declared_mime="image/png")
    with pytest.raises(MediaFailure) as info:
        image.normalise(media_files.jpeg(64, 64), params)
    assert info.value.kind == UNSUPPORTED and "image/jpeg" in info.value.reason


def _whole(data: bytes) -> Image.Image:
    """What decoding the whole picture first gives (the way before PNGs were decoded by bands)."""
    im = _open(data)
    im.load()
    goal = image.target_size(*im.size, PARAMS.max_pixels)
    flat = image.flatten(im).reduce(min(im.width // goal[0], im.height // goal[1]))
    return flat.resize(goal, Image.Resampling.LANCZOS)


def _pixels(height: int, width: int, channels: int, depth: int) -> np.ndarray:
    """Smooth gradients with noise on top (every filter has something to do), as bytes per pixel."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:height, 0:width]
    samples = np.stack([(x * 7 + y * (c + 1) * 3) % 65536 for c in range(channels)], axis=2)
    samples = (samples + rng.integers(0, 2048, samples.shape)) % 65536
    if depth == 8:
        return (samples >> 8).astype(np.uint8)
    return samples.astype(">u2").view(np.uint8).reshape(height, width, channels * 2)


@pytest.mark.parametrize(
    ("channels", "depth", "colour"),
    [(3, 8, 2), (4, 8, 6), (1, 8, 0), (2, 8, 4), (1, 16, 0), (2, 16, 4), (3, 16, 2), (4, 16, 6), (1, 8, 3)],
    ids=["RGB", "RGBA", "L", "LA", "L16", "LA16", "RGB16", "RGBA16", "P"],
)
def test_a_png_decoded_by_bands_is_the_whole_decode_shrunk(channels: int, depth: int, colour: int) -> None:
    """Every filter, every colour type and depth: the same pixels as decoding the whole picture."""
    plte = bytes(range(256)) * 3 if colour == 3 else b""
    data = media_files.png_made(_pixels(1100, 1500, channels, depth), depth, colour, plte=plte)
    result = image.normalise(data, PARAMS)
    assert _open(result.data).tobytes() == _whole(data).tobytes()


def test_an_interlaced_png_is_shrunk_from_its_last_pass() -> None:
    data = media_files.png_made(_pixels(1100, 1500, 4, 8), 8, 6, interlace=True)
    result = image.normalise(data, PARAMS)
    got, whole = _open(result.data), _whole(data)
    assert got.size == whole.size
    assert np.abs(np.asarray(got, np.int16) - np.asarray(whole, np.int16)).mean() < 2


def test_a_png_whose_pixel_data_ends_early_is_refused_as_corrupt() -> None:
    data = media_files.png_made(_pixels(1100, 1500, 3, 8), 8, 2)
    with pytest.raises(MediaFailure) as info:
        image.normalise(data[: len(data) // 2] + data[-12:], PARAMS)  # half its IDAT, then IEND
    assert info.value.kind == CORRUPT
