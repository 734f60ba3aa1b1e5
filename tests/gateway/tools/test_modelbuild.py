"""`tiergate models export-onnx`: cached by the source's hash, and clear about what it cannot do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TIERGATE = str(Path(sys.executable).with_name("tiergate"))
CACHE = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser()
LINK = CACHE / "models" / "smollm2-135m-onnx"


@pytest.mark.skipif(not (LINK / "tiergate-build.json").exists(), reason="no ONNX export (scripts/setup.sh)")
def test_a_second_export_of_the_same_model_is_up_to_date_at_once() -> None:
    done = subprocess.run([TIERGATE, "models", "export-onnx"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "up to date" in done.stdout
    target = LINK.resolve()
    assert target.name.startswith("smollm2-135m-onnx-") and LINK.is_symlink()
    info = json.loads((target / "tiergate-build.json").read_text())
    assert info["agreement"]["model.onnx"].startswith("45/45")
    assert {"model.onnx", "model.int8.onnx", "tokenizer.json", "reference.json", "decoder.json"} <= {
        p.name for p in target.iterdir()
    }


def test_a_folder_that_is_no_model_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [TIERGATE, "models", "export-onnx", "--src", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "not a transformers model folder" in done.stderr
