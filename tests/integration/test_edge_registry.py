"""The edge model registry end to end: a real gateway with two versions of SmolLM2 (the shipped GGUF and
the same weights under another path), the official openai client sending a steady stream of requests
while the admin API swaps versions, rollback through the CLI, and what bad registry input gets."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import pytest

from tests.conftest import TIERGATE, Gateway, start_gateway
from tiers.edge import shipped_model_path

MODELS = "/admin/api/edge/models"
FRESH = {"Cache-Control": "no-cache"}  # answered by the model, never replayed from the result cache


@pytest.fixture(scope="module")
def registry_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("edge-registry")
    second = tmp / "smollm2-v2.gguf"
    second.symlink_to(shipped_model_path())
    config = (
        "[cloud]\nenabled = false\n"
        "[edge]\ninstances = 1\nthreads = 1\n"
        '[[edge.models]]\nname = "smol-v1"\nquality = 0.3\n'
        f'[[edge.models]]\nname = "smol-v2"\npath = "{second}"\nquality = 0.4\nmodalities = ["text"]\n'
        "[edge.models.limits]\nmax_images = 0\n"
    )
    gw = start_gateway(tmp, config)
    yield gw
    gw.stop()


@dataclass
class Served:
    started: float
    ended: float
    model: str
    instance: str


def _ask(client: openai.OpenAI, n: int, stream: bool) -> Served:
    messages = [{"role": "user", "content": f"Say hello to guest number {n}."}]
    started = time.monotonic()
    if stream:
        with client.chat.completions.with_streaming_response.create(
            model="edge", messages=messages, max_tokens=6, stream=True
        ) as resp:
            chunks = list(resp.parse())
            model = {c.model for c in chunks}
            assert len(model) == 1 and chunks[-1].choices[0].finish_reason is not None
            return Served(started, time.monotonic(), model.pop(), resp.headers["x-tiergate-instance"])
    raw = client.chat.completions.with_raw_response.create(model="edge", messages=messages, max_tokens=6)
    answer = raw.parse()
    assert answer.choices[0].finish_reason in ("stop", "length")
    return Served(started, time.monotonic(), answer.model, raw.headers["x-tiergate-instance"])


def test_hot_swap_under_load_drops_nothing(registry_gw: Gateway) -> None:
    gw = registry_gw
    served: list[Served] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def client_loop(k: int) -> None:
        client = gw.client(timeout=120)
        n = 0
        while not stop.is_set():
            try:
                served.append(_ask(client, k * 1000 + n, stream=n % 2 == 0))
            except BaseException as exc:  # every failure counts, whatever it is
                failures.append(exc)
            n += 1

    essay_running = threading.Event()

    def essay() -> None:
        """A long answer that is being written on v1 while v2 is activated."""
        messages = [{"role": "user", "content": "Write a very long essay about the history of Rome."}]
        started = time.monotonic()
        try:
            with gw.client(timeout=120).chat.completions.with_streaming_response.create(
                model="edge",
                messages=messages,
                max_tokens=200,
                temperature=0,
                stream=True,
                extra_headers=FRESH,
            ) as resp:
                chunks = []
                for chunk in resp.parse():
                    chunks.append(chunk)
                    essay_running.set()
                assert chunks[-1].choices[0].finish_reason == "length"
                served.append(
                    Served(started, time.monotonic(), chunks[0].model, resp.headers["x-tiergate-instance"])
                )
        except BaseException as exc:
            failures.append(exc)
            essay_running.set()

    clients = [threading.Thread(target=client_loop, args=(k,)) for k in range(3)]
    long_one = threading.Thread(target=essay)
    for t in clients:
        t.start()
    try:
        gw.wait(lambda: len(served) >= 3, 120, "answers from v1")
        long_one.start()
        assert essay_running.wait(120)
        swap_started = time.monotonic()
        resp = httpx.post(
            f"{gw.url}{MODELS}/activate", json={"name": "smol-v2"}, headers=gw.admin, timeout=120
        )
        swap_done = time.monotonic()
        assert resp.status_code == 200, resp.text
        assert resp.json()["active"] == "smol-v2"
        count = len(served)
        gw.wait(lambda: len(served) >= count + 4, 180, "answers after the swap")
    finally:
        stop.set()
        for t in [*clients, long_one]:
            if t.is_alive() or t is not long_one:
                t.join(180)
    assert failures == []
    for s in served:
        assert s.instance == f"{s.model}/0"
    before = [s for s in served if s.ended < swap_started]
    after = [s for s in served if s.started > swap_done]
    assert before and all(s.model == "smol-v1" for s in before)
    assert after and all(s.model == "smol-v2" for s in after)
    # what was inside the old version when it was swapped out (the essay at least) finished there
    finished_on_v1 = [s for s in served if s.model == "smol-v1" and s.ended > swap_done]
    assert any(s.started < swap_started for s in finished_on_v1), served
    listing = httpx.get(f"{gw.url}{MODELS}", headers=gw.admin).json()
    v2 = next(m for m in listing["data"] if m["name"] == "smol-v2")
    assert (v2["status"], v2["quality"], v2["limits"]["max_images"]) == ("active", 0.4, 0)
    assert v2["instances"][0]["name"] == "smol-v2/0"


def test_rollback_from_the_cli(registry_gw: Gateway) -> None:
    gw = registry_gw
    if httpx.get(f"{gw.url}{MODELS}", headers=gw.admin).json()["active"] != "smol-v2":
        assert httpx.post(f"{gw.url}{MODELS}/activate", json={"name": "smol-v2"}, headers=gw.admin).is_success
    cli = [TIERGATE, "edge", "rollback", "--url", gw.url, "--key", gw.admin_key]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '"active": "smol-v1"' in done.stdout
    assert _ask(gw.client(), 1, stream=False).instance == "smol-v1/0"
    again = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "nothing to roll back to" in again.stderr
    listed = subprocess.run(
        [TIERGATE, "edge", "list", "--url", gw.url, "--key", gw.admin_key], capture_output=True, text=True
    )
    assert listed.returncode == 0 and '"previous": null' in listed.stdout
    register = [
        TIERGATE,
        "edge",
        "register",
        "smol-v3",
        "--path",
        str(shipped_model_path()),
        "--quality",
        "0.6",
    ]
    made = subprocess.run([*register, "--url", gw.url, "--key", gw.admin_key], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    v3 = next(m for m in json.loads(made.stdout)["data"] if m["name"] == "smol-v3")
    assert (v3["status"], v3["quality"], v3["backend"]) == ("available", 0.6, "llamacpp")
    refused = subprocess.run(
        [*register, "--quality", "7", "--url", gw.url, "--key", gw.admin_key], capture_output=True, text=True
    )
    assert refused.returncode == 1 and "400" in refused.stderr and "<= 1.0" in refused.stderr


ONNX = Path(os.environ.get("TIERGATE_BUILD_CACHE_DIR", "~/.cache/tiergate")).expanduser() / "models"
ONNX = ONNX / "smollm2-135m-onnx"


@pytest.mark.skipif(not (ONNX / "model.onnx").exists(), reason="no ONNX export (scripts/setup.sh)")
def test_a_gguf_version_swaps_to_an_onnx_one_and_back(registry_gw: Gateway) -> None:
    gw = registry_gw
    # The fp32 graph: the INT8 one of this month's exports is refused (docs/edge.md, "INT8").
    onnx = {"name": "smol-onnx", "backend": "onnx", "path": str(ONNX), "quality": 0.35}
    assert httpx.post(f"{gw.url}{MODELS}", json=onnx, headers=gw.admin).status_code == 201
    before = httpx.get(f"{gw.url}{MODELS}", headers=gw.admin).json()["active"]
    resp = httpx.post(f"{gw.url}{MODELS}/activate", json={"name": "smol-onnx"}, headers=gw.admin, timeout=120)
    assert resp.status_code == 200, resp.text
    ready = gw.readyz()["tiers"][0]
    assert "onnxruntime fp32" in ready["detail"]
    served = _ask(gw.client(), 3, stream=True)
    assert (served.model, served.instance) == ("smol-onnx", "smol-onnx/0")
    back = httpx.post(f"{gw.url}{MODELS}/rollback", headers=gw.admin, timeout=120)
    assert back.status_code == 200 and back.json()["active"] == before
    assert _ask(gw.client(), 4, stream=False).model == before


def _error(resp: httpx.Response, status: int) -> dict[str, object]:
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return dict(error)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"name": "x", "quality": 3}, "<= 1.0"),
        ({"name": "x", "backend": "tensorrt"}, "backend"),
        ({"name": "x", "modalities": ["smell"]}, "modalities"),
        ({"name": "x y"}, "name"),
        ({"name": "x", "wat": 1}, "unknown field `wat`"),
        ({"name": "x", "path": "/nonexistent/model.gguf"}, "is not a file"),
        ({"name": "x", "backend": "onnx", "path": "/nonexistent/onnx"}, "lacks decoder.json, tokenizer.json"),
    ],
)
def test_registry_input_errors_are_400(registry_gw: Gateway, body: dict[str, object], says: str) -> None:
    resp = httpx.post(f"{registry_gw.url}{MODELS}", json=body, headers=registry_gw.admin)
    error = _error(resp, 400)
    assert error["type"] == "invalid_request_error" and says in str(error["message"])


def test_unknown_versions_missing_names_and_tenant_keys(registry_gw: Gateway, tmp_path: Path) -> None:
    gw = registry_gw
    assert (
        _error(httpx.post(f"{gw.url}{MODELS}/activate", json={"name": "v9"}, headers=gw.admin), 404)["param"]
        == "name"
    )
    assert "name" in str(
        _error(httpx.post(f"{gw.url}{MODELS}/activate", json={}, headers=gw.admin), 400)["message"]
    )
    assert _error(httpx.get(f"{gw.url}{MODELS}", headers=gw.auth), 403)["type"] == "permission_error"
    assert _error(httpx.get(f"{gw.url}{MODELS}"), 401)["type"] == "invalid_request_error"
    # a registered version appears as available; a broken file fails its activation, v1 serves on
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 64)
    made = httpx.post(f"{gw.url}{MODELS}", json={"name": "broken", "path": str(broken)}, headers=gw.admin)
    assert made.status_code == 201
    assert {m["name"]: m["status"] for m in made.json()["data"]}["broken"] == "available"
    failed = _error(httpx.post(f"{gw.url}{MODELS}/activate", json={"name": "broken"}, headers=gw.admin), 400)
    assert failed["code"] == "invalid_model" and "did not load" in str(failed["message"])
    assert (
        _ask(gw.client(), 2, stream=True).model
        == httpx.get(f"{gw.url}{MODELS}", headers=gw.admin).json()["active"]
    )


def test_two_instances_serve_two_clients_at_once(tmp_path: Path) -> None:
    """Admission gives the edge one slot per instance, and the requests spread over them."""
    gw = start_gateway(
        tmp_path, "[cloud]\nenabled = false\n[edge]\ninstances = 2\nthreads = 1\nmax_sequences = 1\n"
    )
    try:
        essay = [{"role": "user", "content": "Write a very long essay about the history of Rome."}]
        client = gw.client(timeout=120)
        streams = [
            client.chat.completions.with_streaming_response.create(
                model="edge", messages=essay, max_tokens=200, temperature=0, stream=True
            )
            for _ in range(2)
        ]
        with streams[0] as first, streams[1] as second:
            # both have their first piece while the other is still writing: neither waits for the other
            first_chunks, second_chunks = first.iter_lines(), second.iter_lines()
            assert next(c for c in first_chunks if c.startswith("data: "))
            assert next(c for c in second_chunks if c.startswith("data: "))
            instances = {first.headers["x-tiergate-instance"], second.headers["x-tiergate-instance"]}
            edge = next(t for t in gw.readyz()["tiers"] if t["name"] == "edge")
            assert edge["in_flight"] == 2 and edge["queued"] == 0
            assert edge["device"] == "cpu" and edge["tokens_per_s"] > 0  # where it runs, its speed
        assert instances == {"edge-smollm2-135m/0", "edge-smollm2-135m/1"}
    finally:
        gw.stop()
