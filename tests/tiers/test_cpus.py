"""The split of this machine's CPUs between the in-process edge and the local vLLM server."""

from __future__ import annotations

import asyncio
import os
import stat
import threading
from pathlib import Path

import pytest

import gateway.settings
import tiers._cpus
from gateway.settings import Settings, SettingsError, load_settings
from tiers import split_cpus, usable_cpus
from tiers._cpus import pin_this_thread
from tiers.cloud import CloudConfig, LocalServer
from tiers.cloud._local import LocalVLLMServer
from tiers.edge import EdgeConfig, LlamaCppTier
from tiers.edge._config import default_threads

linux_only = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")


@pytest.mark.parametrize(
    ("cpus", "edge", "server"),
    [
        ([], [], []),
        ([3], [3], [3]),  # one CPU cannot be split: both share it
        ([0, 1], [0], [1]),
        ([0, 1, 2], [0, 1], [2]),
        ([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3], [4, 5, 6, 7]),
        ([2, 5, 9, 11], [2, 5], [9, 11]),  # the CPUs this process may use, not 0..n-1
    ],
)
def test_split_gives_the_edge_the_lower_half(cpus: list[int], edge: list[int], server: list[int]) -> None:
    assert split_cpus(cpus) == (edge, server)


def test_the_edge_engine_threads_default_to_its_own_cpus() -> None:
    assert default_threads(1, [0, 1, 2, 3]) == 4
    assert default_threads(2, [0, 1, 2, 3]) == 2
    assert default_threads(4, [0]) == 1
    assert default_threads(1) == max(1, (os.cpu_count() or 1) - 1)


@pytest.fixture
def eight_cpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway.settings, "usable_cpus", lambda: list(range(8)))
    monkeypatch.setattr(
        tiers._cpus, "usable_cpus", lambda: list(range(8))
    )  # what settings are checked against


def test_the_embedded_defaults_split_the_cpus(eight_cpus: None) -> None:
    settings = Settings()
    assert settings.edge_config().cpus == [0, 1, 2, 3]
    assert settings.local_vllm().cpus == [4, 5, 6, 7]


def test_batch_threads_default_to_the_engine_threads(eight_cpus: None) -> None:
    edge = Settings().edge_config()
    engine = edge.for_model(edge.model_specs()[0])
    assert (engine.threads, engine.batch_threads) == (4, 4)
    chosen = load_settings(**{"edge.threads": 1, "cloud.enabled": False}).edge_config()
    assert chosen.for_model(chosen.model_specs()[0]).batch_threads == 1  # unset: as threads
    chosen = load_settings(**{"edge.batch_threads": 2, "cloud.enabled": False}).edge_config()
    assert chosen.for_model(chosen.model_specs()[0]).batch_threads == 2


def test_explicit_cpus_are_kept(eight_cpus: None) -> None:
    settings = load_settings(**{"edge.cpus": [0, 1], "cloud.local.cpus": [2, 3, 4, 5, 6, 7]})
    assert settings.edge_config().cpus == [0, 1]
    assert settings.local_vllm().cpus == [2, 3, 4, 5, 6, 7]


def test_one_list_set_by_hand_leaves_the_other_engine_the_rest(eight_cpus: None) -> None:
    settings = load_settings(**{"edge.cpus": [0, 1]})
    assert settings.edge_config().cpus == [0, 1]
    assert settings.local_vllm().cpus == [2, 3, 4, 5, 6, 7]
    settings = load_settings(**{"cloud.local.cpus": [7]})
    assert settings.edge_config().cpus == [0, 1, 2, 3, 4, 5, 6]


@pytest.mark.skipif(not usable_cpus(), reason="the platform does not say which CPUs may be used")
@pytest.mark.parametrize("setting", ["edge.cpus", "cloud.local.cpus"])
def test_a_cpu_this_process_may_not_use_stops_start_up_with_a_clear_message(setting: str) -> None:
    missing = max(usable_cpus()) + 1
    with pytest.raises(
        SettingsError, match=rf"{setting}: this process may not run on CPU {missing} \(it may use"
    ):
        load_settings(**{setting: [min(usable_cpus()), missing]})


@pytest.mark.parametrize(
    "settings",
    [
        Settings(cloud=CloudConfig(urls=["http://127.0.0.1:9"])),  # a remote pool: nothing to share with
        Settings(cloud=CloudConfig(local=LocalServer(enabled=False))),
        Settings(cloud=CloudConfig(enabled=False)),
        Settings(edge=EdgeConfig(enabled=False)),
        Settings(cloud=CloudConfig(local=LocalServer(split_cpus=False))),
    ],
    ids=["remote-cloud", "no-local-server", "no-cloud", "no-edge", "split-off"],
)
def test_nothing_is_pinned_unless_both_engines_run_here(eight_cpus: None, settings: Settings) -> None:
    assert settings.edge_config().cpus == []
    assert settings.local_vllm().cpus == []


@linux_only
def test_pinning_a_thread_leaves_its_caller_alone() -> None:
    before = os.sched_getaffinity(0)
    one = min(before)
    seen: list[set[int]] = []

    def worker() -> None:
        pin_this_thread([one])
        seen.append(os.sched_getaffinity(0))
        inner = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
        inner.start()
        inner.join()

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == [{one}, {one}]  # the thread, and a thread it starts (as llama.cpp's would)
    assert os.sched_getaffinity(0) == before


@linux_only
def test_the_edge_worker_thread_runs_on_its_cpus() -> None:
    one = min(usable_cpus())
    tier = LlamaCppTier(EdgeConfig(cpus=[one]))
    try:
        assert tier._executor.submit(os.sched_getaffinity, 0).result(10) == {one}
    finally:
        tier._executor.shutdown()
    assert os.sched_getaffinity(0) == set(usable_cpus())


@linux_only
def test_the_local_server_starts_on_its_cpus_with_openmp_bound_to_them(tmp_path: Path) -> None:
    """A stand-in interpreter records what the server process inherits: its CPUs and vLLM's binding."""
    cpu = max(usable_cpus())
    record = tmp_path / "record"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'echo "bind=$VLLM_CPU_OMP_THREADS_BIND" > {record}.tmp\n'
        f"grep Cpus_allowed_list /proc/self/status >> {record}.tmp\n"
        f"mv {record}.tmp {record}\n"
        "exec sleep 60\n"
    )
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    config = LocalServer(python=str(python), model_dir=str(tmp_path), cpus=[cpu])

    async def run() -> str:
        server = LocalVLLMServer(config, str(tmp_path))
        await server.start()
        try:
            for _ in range(100):
                if record.exists():
                    return record.read_text()
                await asyncio.sleep(0.05)
            raise AssertionError("the stand-in server never ran")
        finally:
            await server.stop(grace_s=5)

    lines = asyncio.run(run()).split()
    assert lines[0] == f"bind={cpu}"
    assert lines[-1] == str(cpu)  # Cpus_allowed_list:	<cpu>
