"""``tiergate doctor``: check an installed appliance and say what to fix.

Each check gives a :class:`Finding` (ok, warn or fail) with what it saw and, when something is
wrong, the fix. Any failure makes the command exit 1. With ``--root`` it checks an install made
under that root (paths in the config are read under it); ports, disk and GPU are this machine's.

:class:`Doctor` runs every check in order. The install's own checks are here (release, versions,
model hashes, engines, config, user, unit, data folder and disk); those of this machine and what
the install talks to (port, Redis/PostgreSQL, GPU) are in ``doctor_host``; ``doctor_report`` has
the :class:`Finding` and its text and JSON forms.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from gateway.settings import Settings, SettingsError, load_settings
from gateway.tools.appliance import doctor_host as host
from gateway.tools.appliance import installer as inst
from gateway.tools.appliance.doctor_report import Finding, Status, as_json, render

__all__ = ["Doctor", "Finding", "Status", "as_json", "render"]

REINSTALL = "reinstall the bundle: tiergate install --from BUNDLE (config and data are kept)"
MIN_FREE_BYTES = 1 << 30  # below this: a warning
LOW_FREE_BYTES = 200 << 20  # below this: a failure


class Doctor:
    def __init__(self, root: Path = Path("/"), config: Path | None = None) -> None:
        self.root = root
        self.config = config or root / inst.ETC / inst.CONFIG
        self.settings: Settings | None = None
        self.release: Path | None = None
        self.info: dict[str, object] = {}

    def under(self, path: str | Path) -> Path:
        """A path as the installed system sees it, under this root."""
        p = Path(path)
        return self.root / p.relative_to("/") if p.is_absolute() else p

    def run(self) -> list[Finding]:
        checks: list[Callable[[], list[Finding]]] = [
            self.check_release,
            self.check_versions,
            self.check_models,
            self.check_engines,
            self.check_config,
            self.check_user,
            self.check_unit,
            self.check_data,
            self.check_port,
            self.check_shared,
            self.check_gpu,
        ]
        out: list[Finding] = []
        for check in checks:
            try:
                out += check()
            except Exception as exc:  # a check that breaks is itself a finding, not a crash
                out.append(Finding(check.__name__.removeprefix("check_"), "fail", f"check failed: {exc}"))
        return out

    # -- checks -------------------------------------------------------------------------------

    def check_release(self) -> list[Finding]:
        current = self.root / inst.PREFIX / "current"
        if not current.is_symlink():
            return [Finding("release", "fail", f"no release installed ({current} is missing)", REINSTALL)]
        release = current.resolve()
        if not (release / ".complete").is_file() or not (release / inst.INFO).is_file():
            return [
                Finding("release", "fail", f"{release.name} is incomplete (an install stopped)", REINSTALL)
            ]
        self.release = release
        self.info = json.loads((release / inst.INFO).read_text())
        previous = self.root / inst.PREFIX / "previous"
        back = f"; rollback to {previous.resolve().name} possible" if previous.is_symlink() else ""
        return [Finding("release", "ok", f"tiergate {self.info['version']} ({release.name}){back}")]

    def _site(self) -> Path | None:
        if self.release is None:
            return None
        found = sorted((self.release / "venv" / "lib").glob("python3*/site-packages"))
        return found[0] if found else None

    def check_versions(self) -> list[Finding]:
        site = self._site()
        if site is None:
            return []
        installed = {
            _key(d.metadata["Name"]): d.version
            for d in md.distributions(path=[str(site)])
            if d.metadata["Name"]
        }
        wanted = self.info.get("versions")
        assert isinstance(wanted, dict)
        wrong = [
            f"{name} {installed.get(_key(name), 'missing')} (bundle: {version})"
            for name, version in wanted.items()
            if installed.get(_key(name)) != version
        ]
        cfg = (self.release / "venv" / "pyvenv.cfg").read_text() if self.release else ""
        python = next(
            (line.split("=")[1].strip() for line in cfg.splitlines() if line.startswith("version")), "?"
        )
        findings = []
        home = next((line.split("=")[1].strip() for line in cfg.splitlines() if line.startswith("home")), "")
        if home and not (Path(home) / "python3").exists():
            findings.append(
                Finding(
                    "python",
                    "fail",
                    f"the environment's Python ({home}/python3) is gone",
                    "install python3 " + python + " again, then " + REINSTALL,
                )
            )
        if wrong:
            findings.append(Finding("versions", "fail", "; ".join(wrong[:5]), REINSTALL))
        else:
            key = ("tiergate", "llama-cpp-python", "onnxruntime", "litestar")
            shown = ", ".join(f"{k} {installed.get(k, '-')}" for k in key)
            findings.append(
                Finding("versions", "ok", f"{len(wanted)} packages as bundled ({shown}); Python {python}")
            )
        return findings

    def check_models(self) -> list[Finding]:
        site, models = self._site(), self.info.get("models")
        if site is None or not isinstance(models, dict):
            return []
        out = []
        edge = models.get("edge")
        if isinstance(edge, dict):
            out.append(_hash_finding("model:edge", site / str(edge["file"]), str(edge["sha256"])))
        for kind in ("cloud", "embedding", "wordnet", "speech"):  # folders copied into the release
            model = models.get(kind)
            if isinstance(model, dict) and self.release is not None:
                out.append(self._folder_finding(f"model:{kind}", model))
        return out

    def _folder_finding(self, check: str, model: dict[str, object]) -> Finding:
        assert self.release is not None
        files = model.get("files")
        if not isinstance(files, dict):  # bundle.json's {path: sha256}
            return Finding(check, "fail", "bundle.json does not list its files", REINSTALL)
        bad = [
            f
            for f, digest in files.items()
            if _hash_finding("", self.release / f, str(digest)).status != "ok"
        ]
        if bad:
            return Finding(
                check, "fail", f"{len(bad)} files missing or changed: {', '.join(bad[:3])}", REINSTALL
            )
        return Finding(check, "ok", f"{model['name']}: {len(files)} files match their SHA-256")

    def check_engines(self) -> list[Finding]:
        """The release's own Python loads the edge engines (native libraries: libgomp and the like)."""
        if self.release is None:
            return []
        python = self.release / "venv" / "bin" / "python"
        done = subprocess.run(
            [str(python), "-c", "import llama_cpp, onnxruntime, ctranslate2; print(llama_cpp.__version__)"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd="/",
        )
        if done.returncode == 0:
            return [Finding("engines", "ok", f"llama.cpp {done.stdout.strip()} and ONNX Runtime load")]
        error = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
        fix = REINSTALL
        if "libgomp" in error:
            fix = "install the OpenMP runtime: apt-get install libgomp1 (RHEL: dnf install libgomp)"
        return [Finding("engines", "fail", f"the edge engines do not load: {error}", fix)]

    def check_config(self) -> list[Finding]:
        if not self.config.is_file():
            return [
                Finding(
                    "config",
                    "fail",
                    f"{self.config} is missing",
                    f"copy {self.config}.dist (or the bundle's config/tiergate.toml) to {self.config}",
                )
            ]
        try:
            environ = os.environ if self.root == Path("/") else {}
            self.settings = load_settings(self.config, environ=environ)
        except SettingsError as exc:
            return [
                Finding(
                    "config",
                    "fail",
                    str(exc),
                    f"correct {self.config}; README 'Configuration' lists every setting",
                )
            ]
        mode = self.config.stat().st_mode & 0o777
        if mode & 0o004:
            return [
                Finding(
                    "config",
                    "warn",
                    f"{self.config} is readable by everyone (mode {mode:o})",
                    f"chmod 640 {self.config} (it may hold database passwords)",
                )
            ]
        return [Finding("config", "ok", f"{self.config} is valid")]

    def check_user(self) -> list[Finding]:
        passwd = self.root / "etc/passwd"
        users = [line.split(":")[0] for line in passwd.read_text().splitlines()] if passwd.exists() else []
        if inst.USER not in users:
            return [
                Finding("user", "fail", f"no system user {inst.USER!r}", f"systemd-sysusers {inst.SYSUSERS}")
            ]
        return [Finding("user", "ok", f"system user {inst.USER!r} exists")]

    def check_unit(self) -> list[Finding]:
        unit = self.root / inst.UNIT
        if not unit.is_file():
            return [Finding("unit", "fail", f"{unit} is missing", REINSTALL)]
        out = []
        if unit.read_text() != inst.UNIT_TEXT:
            out.append(
                Finding(
                    "unit",
                    "warn",
                    f"{unit} was edited; an upgrade rewrites it",
                    "put local changes in a drop-in: systemctl edit tiergate",
                )
            )
        if not (self.root / inst.WANTS).is_symlink():
            out.append(
                Finding("unit", "warn", "the service does not start at boot", "systemctl enable tiergate")
            )
        if self.root == Path("/") and Path("/run/systemd/system").is_dir():
            active = subprocess.run(
                ["systemctl", "is-active", "tiergate"], capture_output=True, text=True
            ).stdout
            if active.strip() != "active":
                out.append(
                    Finding(
                        "service",
                        "fail",
                        f"tiergate.service is {active.strip()}",
                        "journalctl -u tiergate -n 50 says why; then systemctl restart tiergate",
                    )
                )
        return out or [Finding("unit", "ok", f"{inst.UNIT.name} installed and enabled")]

    def check_data(self) -> list[Finding]:
        data = self.under(self.settings.data_dir if self.settings else "/" + str(inst.STATE))
        if not data.is_dir():
            return [
                Finding(
                    "data", "fail", f"{data} is missing", f"mkdir -m 750 {data} && chown {inst.USER}: {data}"
                )
            ]
        out = []
        owner = _owner(self.root, data.stat().st_uid)
        if owner not in (inst.USER, None) and os.geteuid() == 0:
            out.append(
                Finding(
                    "data",
                    "fail",
                    f"{data} belongs to {owner}, the service runs as {inst.USER}",
                    f"chown -R {inst.USER}: {data}",
                )
            )
        free = shutil.disk_usage(data).free
        gib = free / (1 << 30)
        if free < LOW_FREE_BYTES:
            out.append(Finding("disk", "fail", f"{gib:.2f} GiB free under {data}", "free disk space"))
        elif free < MIN_FREE_BYTES:
            out.append(
                Finding("disk", "warn", f"{gib:.2f} GiB free under {data}", "free disk space (1 GiB or more)")
            )
        else:
            out.append(Finding("disk", "ok", f"{gib:.1f} GiB free under {data}"))
        return out

    # -- this machine and what the install talks to (gateway.tools.appliance.doctor_host) ---------

    def check_port(self) -> list[Finding]:
        return [] if self.settings is None else host.check_port(self.settings.server.port)

    def check_shared(self) -> list[Finding]:
        return [] if self.settings is None else host.check_shared(self.settings)

    def check_gpu(self) -> list[Finding]:
        """GPU visibility, and whether the bundle's llama.cpp build (bundle.json's ``accelerator``;
        bundles from before it are the CPU build) fits this box's driver and GPUs."""
        built = self.info.get("accelerator")
        built = built if isinstance(built, dict) else {}
        return host.check_gpu(str(built.get("variant", "cpu")), str(built.get("cuda", "")))


def _key(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _hash_finding(check: str, path: Path, digest: str) -> Finding:
    if not path.is_file():
        return Finding(check, "fail", f"{path} is missing", REINSTALL)
    if inst.sha256_file(path) != digest:
        return Finding(check, "fail", f"{path} does not match its SHA-256 from the bundle", REINSTALL)
    return Finding(check, "ok", f"{path.name} matches its SHA-256 ({digest[:12]})")


def _owner(root: Path, uid: int) -> str | None:
    passwd = root / "etc/passwd"
    for line in passwd.read_text().splitlines() if passwd.exists() else []:
        parts = line.split(":")
        if len(parts) > 2 and parts[2] == str(uid):
            return parts[0]
    return None
