"""The remote embedding backend: a vLLM pooling server (``vllm serve <folder> --runner pooling``), or
several, computing the vectors the gateway's cache does not hold.

The gateway tokenizes (``_base.py``) and sends token ids, so the cache key, the 400s for a long input and
the tokens billed are the same as on the in-process backend; the server's own ``usage`` is checked
against them, not billed. One request's misses go out as calls of at most ``max_batch`` rows, all at
once (the server batches what arrives together); each call goes to the next replica in turn and on to
the others when one cannot be reached. Every replica unreachable: 503; a replica that answers wrongly
(an error status, a malformed body, wrong vector sizes): 502 with what it said.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging

import httpx
import msgspec
import numpy as np

from tiers._errors import TierFailed, TierOverloaded, TierTimeout, TierUnavailable
from tiers.embedding._base import Embedder
from tiers.embedding._batcher import Observe, Rows, Vectors
from tiers.embedding._config import EmbeddingConfig

log = logging.getLogger(__name__)


class _Item(msgspec.Struct):
    index: int
    embedding: str  # base64 of little-endian float32, as asked


class _Usage(msgspec.Struct):
    prompt_tokens: int


class _Answer(msgspec.Struct):
    data: list[_Item]
    usage: _Usage


_decoder = msgspec.json.Decoder(_Answer)
_encoder = msgspec.json.Encoder()


class VllmEmbedder(Embedder):
    """``embed(rows)`` → one unit vector per row, from the vLLM servers in ``[embedding.vllm]``."""

    def __init__(
        self, config: EmbeddingConfig, *, name: str = "embedding-vllm", observe: Observe | None = None
    ) -> None:
        super().__init__(config, name)
        remote = config.vllm
        self.urls = [u.rstrip("/") for u in remote.urls]
        self._served = remote.served_model_name or config.model
        self._headers = {"content-type": "application/json"}
        if remote.api_key:
            self._headers["authorization"] = f"Bearer {remote.api_key}"
        self._timeout = httpx.Timeout(remote.total_s, connect=remote.connect_s)
        self._client: httpx.AsyncClient | None = None
        self._turn = itertools.count()
        self._observe = observe or (lambda rows, width: None)
        self._in_flight = 0

    @property
    def queued(self) -> int:
        return self._in_flight

    def _engine_ready(self) -> None:
        self._client = httpx.AsyncClient(
            timeout=self._timeout, limits=httpx.Limits(max_keepalive_connections=64)
        )

    async def embed(self, rows: Rows) -> Vectors:
        await self.loaded()
        most = self.config.max_queue
        if self._in_flight and self._in_flight + len(rows) > most:
            raise TierOverloaded(
                self.name,
                f"{self._in_flight} inputs are waiting for the embedding servers (at most {most})",
                reason="embedding_queue",
            )
        self._in_flight += len(rows)
        try:
            step = self.config.max_batch
            calls = [rows[i : i + step] for i in range(0, len(rows), step)]
            if len(calls) == 1:
                return await self._call(calls[0])
            return np.concatenate(await asyncio.gather(*map(self._call, calls)))
        finally:
            self._in_flight -= len(rows)

    async def _call(self, rows: Rows) -> Vectors:
        """One call, to the next replica in turn, or the ones after it while they cannot be reached."""
        assert self._client is not None
        body = _encoder.encode({"model": self._served, "input": rows, "encoding_format": "base64"})
        first = next(self._turn)
        unreachable: list[str] = []
        for k in range(len(self.urls)):
            url = self.urls[(first + k) % len(self.urls)]
            try:
                resp = await self._client.post(f"{url}/v1/embeddings", content=body, headers=self._headers)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                log.warning("embedding server %s cannot be reached: %s", url, exc)
                unreachable.append(f"{url} ({type(exc).__name__})")
                continue
            except httpx.TimeoutException as exc:
                raise TierTimeout(self.name, f"{url} did not answer within {self._timeout.read}s") from exc
            except httpx.HTTPError as exc:  # the connection broke mid-answer
                raise TierFailed(self.name, f"{url} failed: {type(exc).__name__}: {exc}") from exc
            self._observe(len(rows), max(map(len, rows)))
            return self._vectors(url, resp, rows)
        raise TierUnavailable(self.name, "no embedding server can be reached: " + ", ".join(unreachable))

    def _vectors(self, url: str, resp: httpx.Response, rows: Rows) -> Vectors:
        if resp.status_code != 200:
            raise TierFailed(self.name, f"{url} answered {resp.status_code}: {resp.text[:300]}")
        try:
            answer = _decoder.decode(resp.content)
        except msgspec.DecodeError as exc:
            raise TierFailed(self.name, f"{url} sent a malformed embeddings answer: {exc}") from exc
        size = 4 * self.dimensions
        items = sorted(answer.data, key=lambda d: d.index)
        if [d.index for d in items] != list(range(len(rows))):
            raise TierFailed(self.name, f"{url} sent {len(items)} vectors for {len(rows)} inputs")
        raw = [base64.b64decode(d.embedding) for d in items]
        if any(len(r) != size for r in raw):
            raise TierFailed(
                self.name, f"{url} sent vectors of another size than {self.dimensions} (is it {self.model}?)"
            )
        tokens = sum(map(len, rows))
        if answer.usage.prompt_tokens != tokens:  # the same ids went out: a different count is a bug
            log.warning("%s counted %d tokens for %d sent", url, answer.usage.prompt_tokens, tokens)
        return np.frombuffer(b"".join(raw), dtype="<f4").reshape(len(rows), self.dimensions)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
