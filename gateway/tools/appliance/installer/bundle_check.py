"""A bundle as the installer receives it: opened (a folder or an archive of one) and checked against
its manifest and this machine before anything is written. Standard library only."""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import sysconfig
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .layout import INFO, MANIFEST, InstallError


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def platform_tag() -> str:
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


@dataclass(frozen=True)
class Bundle:
    folder: Path
    info: dict[str, object]
    digest: str  # sha256 of the manifest: the bundle's identity

    @property
    def version(self) -> str:
        return str(self.info["version"])

    @property
    def release(self) -> str:
        return f"{self.version}-{self.digest[:12]}"

    @property
    def wheels(self) -> Path:
        return self.folder / "wheels"


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Path]:
    """A bundle folder, or a .tar/.tar.gz of one unpacked into a temporary folder."""
    if path.is_dir():
        yield path
        return
    if not path.is_file() or not tarfile.is_tarfile(path):
        raise InstallError(f"{path} is neither a bundle folder nor a bundle archive (.tar, .tar.gz)")
    with tempfile.TemporaryDirectory(prefix="tiergate-bundle-") as tmp, tarfile.open(path) as archive:
        archive.extractall(tmp, filter="data")
        tops = [p for p in Path(tmp).iterdir() if p.is_dir()]
        yield tops[0] if len(tops) == 1 and (tops[0] / MANIFEST).exists() else Path(tmp)


def verify(folder: Path) -> Bundle:
    """Check every file against the manifest and the bundle against this machine."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise InstallError(
            f"{folder} has no {MANIFEST}: not a tiergate bundle (make one with `tiergate bundle`)"
        )
    listed: dict[str, str] = {}
    for line in manifest.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name:
            listed[name] = digest
    present = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST}
    if unlisted := sorted(present - set(listed)):
        raise InstallError(f"files not in the bundle's manifest: {', '.join(unlisted[:5])}")
    for name, digest in listed.items():
        path = folder / name
        if not path.is_file():
            raise InstallError(f"the bundle is incomplete: {name} is missing; copy the bundle again")
        if sha256_file(path) != digest:
            raise InstallError(f"the bundle is damaged: {name} does not match its checksum; copy it again")
    info = json.loads((folder / INFO).read_text())
    if info.get("python") != python_tag() or info.get("platform") != platform_tag():
        raise InstallError(
            f"this bundle was built for {info.get('python')} on {info.get('platform')}; this machine runs "
            f"{python_tag()} on {platform_tag()}: build the bundle on a machine like this one"
        )
    return Bundle(folder, info, hashlib.sha256(manifest.read_bytes()).hexdigest())
