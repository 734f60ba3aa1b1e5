"""The embeddings benchmark's floor server (bench/embeddings_floor.py) answers what the raw session
computes, in OpenAI's shape: a floor that answered less would flatter it against the gateway."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from bench.embeddings import Raw
from bench.embeddings_floor import app_for
from gateway.settings import load_settings
from tests.openai_schema import EMBEDDINGS, validate
from tiers.embedding import DEFAULT_EMBEDDING_MODEL_DIR

FOLDER = Path(load_settings().build_cache_dir).expanduser() / DEFAULT_EMBEDDING_MODEL_DIR
pytestmark = pytest.mark.skipif(
    not (FOLDER / "model.onnx").exists(), reason="the embedding model is not built (scripts/setup.sh)"
)
TEXTS = ["The quick brown fox jumps over the lazy dog", "Rain is expected in Lisbon"]


async def call(app: Any, body: bytes) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": "POST", "path": "/v1/embeddings"}, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.mark.parametrize("inline", [False, True], ids=["worker-thread", "inline"])
def test_the_floor_answers_the_raw_sessions_vectors_in_openais_shape(inline: bool) -> None:
    raw = Raw(FOLDER)
    app = app_for(raw, inline=inline)
    body = msgspec.json.encode({"model": "all-MiniLM-L6-v2", "input": TEXTS})
    status, answer = asyncio.run(call(app, body))
    assert status == 200
    decoded = msgspec.json.decode(answer)
    validate(EMBEDDINGS, decoded)
    got = np.array([item["embedding"] for item in decoded["data"]], dtype=np.float32)
    np.testing.assert_allclose(got, raw.embed(TEXTS), atol=1e-6)
    assert decoded["usage"]["prompt_tokens"] == sum(map(len, raw.tokenize(TEXTS)))
