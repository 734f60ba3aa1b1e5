"""Install tiergate from an offline bundle as a hardened systemd service; upgrade and roll back.

Standard library only: the bundle ships this file as ``install.py`` and its ``install.sh`` runs it
with the machine's own ``python3`` before anything of tiergate is installed.

What an install writes, under ``--root`` (default ``/``)::

    opt/tiergate/releases/<version>-<bundle id>/   venv/ (pip --no-index from the bundle's wheels),
                                                   models/ (the cloud model, when bundled), bundle.json
    opt/tiergate/current -> releases/...           the release the service runs
    opt/tiergate/previous -> releases/...          what `--rollback` returns to
    etc/tiergate/tiergate.toml                     written once; an upgrade keeps it (new defaults:
                                                   tiergate.toml.dist beside it)
    var/lib/tiergate/                              data (ledger, cache, keys); never touched by upgrades
    etc/systemd/system/tiergate.service            the unit, enabled for multi-user.target
    usr/lib/sysusers.d/tiergate.conf               the system user `tiergate`
    usr/local/bin/tiergate -> opt/tiergate/current/venv/bin/tiergate

Nothing is fetched from a network: every wheel comes from the bundle, whose checksums are verified
before anything is written.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = Path("opt/tiergate")
ETC = Path("etc/tiergate")
STATE = Path("var/lib/tiergate")
UNIT = Path("etc/systemd/system/tiergate.service")
WANTS = Path("etc/systemd/system/multi-user.target.wants/tiergate.service")
SYSUSERS = Path("usr/lib/sysusers.d/tiergate.conf")
BIN_LINK = Path("usr/local/bin/tiergate")
USER = "tiergate"
MANIFEST = "MANIFEST.sha256"
INFO = "bundle.json"
CONFIG = "tiergate.toml"
KEEP_RELEASES = 3

Say = Callable[[str], None]


class InstallError(RuntimeError):
    """The install cannot go on; the message says why and what to do."""


# -- the unit -------------------------------------------------------------------------------------

UNIT_TEXT = """\
# tiergate, installed by `tiergate install`. Local changes: `systemctl edit tiergate` (a drop-in),
# not this file, which an upgrade rewrites.
[Unit]
Description=tiergate OpenAI-compatible gateway (edge model + vLLM pool)
Documentation=file:///opt/tiergate/current/README.md
After=network-online.target
Wants=network-online.target

[Service]
Type=exec
User=tiergate
Group=tiergate
ExecStart=/opt/tiergate/current/venv/bin/tiergate serve --config /etc/tiergate/tiergate.toml
ExecReload=/bin/kill -HUP $MAINPID
Restart=on-failure
RestartSec=2s
# SIGTERM: stop accepting, finish in-flight requests (server.shutdown_grace_s, 30 s), then exit.
KillSignal=SIGTERM
TimeoutStopSec=45s
Environment=HOME=/var/lib/tiergate
WorkingDirectory=/var/lib/tiergate
StateDirectory=tiergate
StateDirectoryMode=0750
ConfigurationDirectory=tiergate
StandardOutput=journal
StandardError=journal
SyslogIdentifier=tiergate
UMask=0027

# Hardening: the gateway needs its data folder, loopback/network sockets and nothing else.
NoNewPrivileges=yes
ProtectSystem=strict
ProtectHome=yes
PrivateTmp=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
LockPersonality=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
SystemCallArchitectures=native
CapabilityBoundingSet=
AmbientCapabilities=

# Resource limits (raise them in a drop-in on a bigger box).
LimitNOFILE=65536
TasksMax=1024
MemoryMax=80%

[Install]
WantedBy=multi-user.target
"""

SYSUSERS_TEXT = 'u tiergate - "tiergate gateway" /var/lib/tiergate /usr/sbin/nologin\n'


# -- the bundle -----------------------------------------------------------------------------------


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


# -- what gets written ----------------------------------------------------------------------------


def venv_files(bundle: Bundle, venv: Path) -> list[Path]:
    """The files pip will write into the release's environment (for --dry-run)."""
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    out: list[Path] = [venv / "pyvenv.cfg", venv / "bin" / "python"]
    for wheel in sorted(bundle.wheels.glob("*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if name.endswith("/"):
                    continue
                head, _, rest = name.partition("/")
                if head.endswith(".data"):
                    scheme, _, rest = rest.partition("/")
                    out.append(venv / "bin" / rest if scheme == "scripts" else site / rest)
                else:
                    out.append(site / name)
                if name.endswith(".dist-info/entry_points.txt"):
                    out += [venv / "bin" / s for s in _console_scripts(z.read(name).decode())]
    return out


def _console_scripts(text: str) -> list[str]:
    names, section = [], ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[console_scripts]" and "=" in line:
            names.append(line.split("=")[0].strip())
    return names


@dataclass
class Installer:
    root: Path
    say: Say = print
    dry_run: bool = False
    start: bool = True

    def at(self, rel: Path | str) -> Path:
        return self.root / rel

    def install(self, bundle: Bundle) -> Path:
        release = PREFIX / "releases" / bundle.release
        target = self.at(release)
        self.say(f"tiergate {bundle.version} (bundle {bundle.digest[:12]}) into {self.root}")
        if self.dry_run:
            self._dry_run(bundle, release)
            return target
        self._user()
        if (target / ".complete").exists():
            self.say(f"release {bundle.release} is installed already; making it current")
        else:
            self._release(bundle, target)
        self._config(bundle)
        self._data()
        self._write(UNIT, UNIT_TEXT)
        self._link(WANTS, Path("/") / UNIT)
        self._switch(release)
        self._link(BIN_LINK, Path("/") / PREFIX / "current" / "venv" / "bin" / "tiergate")
        self._prune()
        self._service("restart")
        return target

    def rollback(self) -> Path:
        current, previous = self.at(PREFIX / "current"), self.at(PREFIX / "previous")
        if not previous.is_symlink() or not previous.resolve().is_dir():
            raise InstallError("there is no previous release to roll back to")
        now, before = os.readlink(current), os.readlink(previous)
        self.say(f"rolling back: {Path(now).name} -> {Path(before).name} (config and data are kept)")
        if self.dry_run:
            self.say(f"would link {current} -> {before} and {previous} -> {now}")
            return Path(before)
        self._replace_link(current, before)
        self._replace_link(previous, now)
        self._service("restart")
        return self.at(PREFIX / "releases" / Path(before).name)

    # -- steps ----------------------------------------------------------------------------------

    def _dry_run(self, bundle: Bundle, release: Path) -> None:
        target = self.at(release)
        files = [*venv_files(bundle, target / "venv"), target / INFO, target / MANIFEST, target / ".complete"]
        if (bundle.folder / "README.md").is_file():
            files.append(target / "README.md")
        models = bundle.folder / "models"
        files += [target / p.relative_to(bundle.folder) for p in sorted(models.rglob("*")) if p.is_file()]
        config = self.at(ETC / CONFIG)
        files += [config if not config.exists() else config.with_suffix(".toml.dist")]
        files += [self.at(p) for p in (SYSUSERS, UNIT, WANTS, PREFIX / "current", BIN_LINK)]
        if self.at(PREFIX / "current").is_symlink():
            files.append(self.at(PREFIX / "previous"))
        files += [self.at("etc/passwd"), self.at("etc/group")]
        for path in files:
            self.say(f"would write {path}")
        self.say(f"would create {self.at(STATE)} (owner {USER}, mode 0750)")
        self.say(f"dry run: {len(files)} files, nothing written")

    def _user(self) -> None:
        self._write(SYSUSERS, SYSUSERS_TEXT)
        if self._uid() is not None:
            return
        self.at("etc").mkdir(parents=True, exist_ok=True)
        tool = shutil.which("systemd-sysusers")
        if tool:
            cmd = [tool, str(self.at(SYSUSERS))]
            if self.root != Path("/"):
                cmd.insert(1, f"--root={self.root}")
        else:
            cmd = [
                "useradd",
                "--system",
                "--user-group",
                "--home-dir",
                "/" + str(STATE),
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ]
            if self.root != Path("/"):
                cmd[1:1] = ["--root", str(self.root)]
        self._run(cmd, f"creating the system user {USER}")

    def _uid(self) -> tuple[int, int] | None:
        if self.root == Path("/"):
            with contextlib.suppress(KeyError):
                entry = pwd.getpwnam(USER)
                return entry.pw_uid, entry.pw_gid
            return None
        passwd = self.at("etc/passwd")
        for line in passwd.read_text().splitlines() if passwd.exists() else []:
            parts = line.split(":")
            if parts[0] == USER:
                return int(parts[2]), int(parts[3])
        return None

    def _release(self, bundle: Bundle, target: Path) -> None:
        if target.exists():
            shutil.rmtree(target)  # an earlier install of it stopped half-way
        target.mkdir(parents=True)
        venv = target / "venv"
        self._run([sys.executable, "-m", "venv", str(venv)], "creating the environment")
        pip = [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--no-index",
            "--quiet",
            "--disable-pip-version-check",
            "--find-links",
            str(bundle.wheels),
        ]
        self._run(
            [*pip, f"tiergate=={bundle.version}"],
            f"installing {len(list(bundle.wheels.glob('*.whl')))} wheels",
        )
        for extra in _strings(bundle.info.get("no_deps")):
            self._run([*pip, "--no-deps", str(bundle.wheels / str(extra))], f"installing {extra}")
        if self.root != Path("/"):
            _relocate(venv, self.root)
        if (bundle.folder / "models").is_dir():
            self.say("copying the models")
            shutil.copytree(bundle.folder / "models", target / "models")
        shutil.copy2(bundle.folder / INFO, target / INFO)
        shutil.copy2(bundle.folder / MANIFEST, target / MANIFEST)
        if (bundle.folder / "README.md").is_file():
            shutil.copy2(bundle.folder / "README.md", target / "README.md")
        (target / ".complete").write_text(bundle.digest + "\n")

    def _config(self, bundle: Bundle) -> None:
        config, fresh = self.at(ETC / CONFIG), (bundle.folder / "config" / CONFIG).read_text()
        if config.exists():
            self._write(ETC / (CONFIG + ".dist"), fresh, mode=0o640)
            self.say(f"kept {config}; this release's defaults are in {config}.dist")
        else:
            self._write(ETC / CONFIG, fresh, mode=0o640)
        self._chown(self.at(ETC), group_only=True)
        self._chown(config, group_only=True)

    def _data(self) -> None:
        data = self.at(STATE)
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o750)
        self._chown(data)

    def _chown(self, path: Path, *, group_only: bool = False) -> None:
        ids = self._uid()
        if ids is not None and os.geteuid() == 0:
            os.chown(path, 0 if group_only else ids[0], ids[1])

    def _switch(self, release: Path) -> None:
        current, previous = self.at(PREFIX / "current"), self.at(PREFIX / "previous")
        new = os.path.relpath(release, PREFIX)
        if current.is_symlink() and os.readlink(current) != new:
            self._replace_link(previous, os.readlink(current))
            self.say(f"upgrade: {Path(os.readlink(current)).name} -> {release.name} (config and data kept)")
        self._replace_link(current, new)

    def _prune(self) -> None:
        keep = {
            self.at(PREFIX / n).resolve() for n in ("current", "previous") if self.at(PREFIX / n).is_symlink()
        }
        releases = sorted(
            self.at(PREFIX / "releases").iterdir(), key=lambda p: p.stat().st_mtime, reverse=True
        )
        for old in [r for r in releases if r.resolve() not in keep][KEEP_RELEASES - len(keep) :]:
            self.say(f"removing old release {old.name}")
            shutil.rmtree(old)

    def _service(self, action: str) -> None:
        if self.root != Path("/") or not Path("/run/systemd/system").is_dir():
            self.say("systemd is not running here: the unit is enabled and starts at the next boot")
            return
        if not self.start:
            self.say("not starting the service (--no-start): systemctl start tiergate")
            return
        self._run(["systemctl", "daemon-reload"], "reloading systemd")
        self._run(["systemctl", action, "tiergate"], f"systemctl {action} tiergate")

    # -- file helpers ---------------------------------------------------------------------------

    def _write(self, rel: Path, text: str, mode: int = 0o644) -> None:
        path = self.at(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.chmod(mode)
        os.replace(tmp, path)

    def _link(self, rel: Path, target: Path) -> None:
        path = self.at(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._replace_link(path, str(target))

    @staticmethod
    def _replace_link(path: Path, target: str) -> None:
        tmp = path.with_name(path.name + ".new")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.symlink(target, tmp)
        os.replace(tmp, path)

    def _run(self, cmd: list[str], what: str) -> None:
        self.say(what)
        # pip sees the bundle only: no index, no find-links or config of this machine's
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env["PIP_CONFIG_FILE"] = os.devnull
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0:
            raise InstallError(f"{what} failed ({' '.join(cmd[:3])} ...):\n{done.stdout}{done.stderr}")


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _relocate(venv: Path, root: Path) -> None:
    """An environment built under --root names its own path with the root in front; take it off,
    so the scripts point where the environment will be when the root is the system's."""
    old, new = str(venv), "/" + str(venv.relative_to(root))
    for path in [*(venv / "bin").iterdir(), venv / "pyvenv.cfg"]:
        if path.is_file() and not path.is_symlink():
            with contextlib.suppress(UnicodeDecodeError):
                text = path.read_text()
                if old in text:
                    path.write_text(text.replace(old, new))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="install.py", description="Install tiergate from an offline bundle."
    )
    parser.add_argument("--from", dest="bundle", type=Path, help="bundle folder or archive")
    parser.add_argument("--root", type=Path, default=Path("/"), help="install under this root (default /)")
    parser.add_argument(
        "--dry-run", action="store_true", help="print every file it would write; write nothing"
    )
    parser.add_argument("--rollback", action="store_true", help="make the previous release current again")
    parser.add_argument("--no-start", action="store_true", help="do not (re)start the service")
    args = parser.parse_args(argv)
    installer = Installer(args.root.resolve(), dry_run=args.dry_run, start=not args.no_start)
    try:
        if args.rollback:
            installer.rollback()
        elif args.bundle is None:
            parser.error("--from BUNDLE is required (or --rollback)")
        else:
            with opened(args.bundle) as folder:
                installer.install(verify(folder))
    except InstallError as exc:
        print(f"tiergate install: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
