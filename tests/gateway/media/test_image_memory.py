"""Large pictures under the pixel limit decode right and in little memory: shrunk while decoded,
flattened and turned on the small image. Each decode runs in a fresh process whose peak resident memory
is reset just before it (``/proc/self/clear_refs``), after a warm-up decode as a worker's, and the growth
of that peak must stay within what :func:`image.peak_bytes` counts from the copies the decoder makes,
plus the file. The figures, beside the 1.5 RGB frames at the model's input size the issue aimed at, are
in docs/media.md (run with ``-s`` to see them)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import cast

import pytest
from PIL import Image

from gateway.media import image
from tests import media_files

# The embedded default's input size: the cloud VLM takes at most 262,144 pixels (512 x 512) per image
# (cloud.limits.max_image_pixels, below media.image.max_pixels), so that is what images are shrunk to.
MODEL_PIXELS = 262_144
PARAMS = image.ImageParams(max_source_pixels=40_000_000, max_pixels=MODEL_PIXELS)
RGB_FRAME = MODEL_PIXELS * 3

MEASURE = """
import sys
from gateway.media import image
from tests import media_files

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

data = open(sys.argv[1], "rb").read()
params = image.ImageParams(40_000_000, int(sys.argv[2]))
warm = media_files.png(64, 48) if data[:4] == b"\\x89PNG" else media_files.jpeg(64, 48)
image.normalise(warm, params)  # imports and the allocator's first arenas, as a worker's warm-up does
with open("/proc/self/clear_refs", "w") as reset:
    reset.write("5")  # the peak (VmHWM) starts again from now
before = status("VmRSS")
result = image.normalise(data, params)
print(status("VmHWM") - before, result.width, result.height)
"""


def _decode_in_a_fresh_process(path: Path) -> tuple[int, int, int]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path), str(MODEL_PIXELS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout.split()
    growth, width, height = (int(v) for v in out)
    return growth, width, height


PICTURES = {
    "6300x6300 RGBA PNG": lambda: media_files.png_marked(6300, 6300, "RGBA"),
    "40 MP PNG turned by EXIF (6)": lambda: media_files.png_marked(7744, 5164, "RGB", orientation=6),
    "40 MP JPEG turned by EXIF (8)": lambda: media_files.jpeg(7744, 5164, orientation=8),
}


@pytest.fixture(scope="module", params=sorted(PICTURES))
def picture(request: pytest.FixtureRequest) -> tuple[str, bytes]:
    return request.param, PICTURES[request.param]()


def test_a_large_picture_is_shrunk_and_turned_upright(picture: tuple[str, bytes]) -> None:
    name, data = picture
    result = image.normalise(data, PARAMS)
    out = Image.open(io.BytesIO(result.data))
    assert out.mode == "RGB" and result.width * result.height <= MODEL_PIXELS
    assert result.width * result.height > 0.98 * MODEL_PIXELS
    w, h = out.size
    if "RGBA" in name:  # the red block stays in the top-left corner, the transparency-free rest blue
        assert (w, h) == (512, 512)
        assert out.getpixel((0, 0)) == (255, 0, 0) and out.getpixel((w - 1, h - 1)) == (0, 0, 255)
    elif "PNG" in name:  # turned a quarter clockwise: the red block is now top right, and it stands
        assert (w, h) == (418, 626)
        assert out.getpixel((w - 1, 0)) == (255, 0, 0) and out.getpixel((0, 0)) == (0, 0, 255)
    else:  # a quarter anticlockwise: the gradient's top-right corner (red 255, green 0) is top left
        assert (w, h) == (418, 626)
        r, g, _ = cast(tuple[int, int, int], out.getpixel((0, 0)))
        assert r > 240 and g < 15


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux's /proc")
def test_a_large_picture_decodes_in_little_memory(tmp_path: Path, picture: tuple[str, bytes]) -> None:
    name, data = picture
    path = tmp_path / "picture"
    path.write_bytes(data)
    growth, width, height = _decode_in_a_fresh_process(path)
    source = Image.open(io.BytesIO(data))
    counted = image.peak_bytes(*source.size, source.format or "", MODEL_PIXELS, turned="EXIF" in name)
    print(
        f"\n{name}: {len(data) / 1024:.0f} KiB, peak RSS +{growth / 2**20:.2f} MiB; counted "
        f"{counted / 2**20:.2f} MiB + the file; 1.5 RGB frames + the file: {(1.5 * RGB_FRAME + len(data)) / 2**20:.2f} MiB"
    )
    assert width * height <= MODEL_PIXELS
    assert growth <= counted + len(data)
