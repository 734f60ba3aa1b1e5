"""The :class:`Installer`: lays a verified bundle out as a release (its own environment, models,
config, data folder, user and unit), makes it current and prunes old ones; rolls back to the
previous release; with ``dry_run``, lists every file it would write. Standard library only."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .bundle_check import Bundle
from .layout import (
    BIN_LINK,
    CONFIG,
    ETC,
    INFO,
    KEEP_RELEASES,
    MANIFEST,
    PREFIX,
    STATE,
    SYSUSERS,
    SYSUSERS_TEXT,
    UNIT,
    UNIT_TEXT,
    USER,
    WANTS,
    InstallError,
    Say,
)


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
