"""A pool of OpenAI-compatible vLLM servers behind one pooled aiohttp client.

aiohttp is on the hot path because it was measured: on this kind of machine a
plain ``httpx.AsyncClient`` saturated at ~400-700 requests/s per core where an
``aiohttp.ClientSession`` served more than 3,000 (see DESIGN.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import msgspec

from tiers._errors import TierError, TierFailed, TierRejected, TierTimeout, TierUnavailable
from tiers._types import Capabilities, Completion, Delta, Generation, Health, Modality, TierState, Usage
from tiers.cloud import _wire
from tiers.cloud._config import CloudConfig
from tiers.cloud._local import LocalVLLMServer

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
_CHAT_PATH = "/v1/chat/completions"
_JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(slots=True)
class Replica:
    url: str
    healthy: bool = False
    in_flight: int = 0
    failures: int = 0
    last_error: str = ""
    latency_ewma_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.latency_ewma_s = (
            seconds if not self.latency_ewma_s else 0.8 * self.latency_ewma_s + 0.2 * seconds
        )

    def mark_down(self, why: str) -> None:
        self.healthy = False
        self.failures += 1
        self.last_error = why


class VLLMPool:
    """The cloud tier: vLLM replicas listed by URL, or one local server it supervises."""

    name = "cloud"

    def __init__(self, config: CloudConfig, log_dir: str | None = None) -> None:
        self._config = config
        self._local = (
            LocalVLLMServer(config.local, log_dir) if not config.urls and config.local.enabled else None
        )
        urls = config.urls or ([self._local.url] if self._local else [])
        self._replicas = [Replica(url.rstrip("/")) for url in urls]
        self._model = config.model or (config.local.served_model_name if self._local else "")
        self._session: aiohttp.ClientSession | None = None
        self._health_task: asyncio.Task[None] | None = None
        self._next = itertools.count()
        t = config.timeouts
        self._timeout = aiohttp.ClientTimeout(total=t.total_s, connect=t.connect_s, sock_read=t.first_byte_s)

    # -- Tier -----------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(
            modalities=frozenset({Modality.TEXT, *self._config.modalities}),
            max_context_tokens=self._config.max_context_tokens,
            model=self._model or "unknown",
        )

    def state(self) -> TierState:
        if not self._replicas:
            return TierState(self.name, Health.DISABLED, detail="no vLLM server configured")
        healthy = sum(r.healthy for r in self._replicas)
        if healthy:
            health = Health.READY
        elif self._local is not None and self._local.starting:
            health = Health.STARTING
        else:
            health = Health.DOWN
        detail = f"{healthy}/{len(self._replicas)} replicas healthy"
        if self._local is not None and not healthy:
            detail += f"; local server: {self._local.status}"
        return TierState(self.name, health, in_flight=sum(r.in_flight for r in self._replicas), detail=detail)

    def replicas(self) -> list[dict[str, Any]]:
        return [
            {
                "url": r.url,
                "healthy": r.healthy,
                "in_flight": r.in_flight,
                "latency_ewma_ms": round(r.latency_ewma_s * 1000, 1),
                "last_error": r.last_error,
            }
            for r in self._replicas
        ]

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._config.max_connections, ttl_dns_cache=300),
            timeout=self._timeout,
            raise_for_status=False,
        )
        if self._local is not None:
            await self._local.start()
        if self._replicas:
            self._health_task = asyncio.create_task(self._watch_health(), name="cloud-health")

    async def aclose(self) -> None:
        if self._health_task is not None:
            self._health_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._health_task
        if self._session is not None:
            await self._session.close()
        if self._local is not None:
            await self._local.stop()

    async def complete(self, gen: Generation) -> Completion:
        replica = self._pick()
        started = time.perf_counter()
        replica.in_flight += 1
        try:
            async with self._post(replica, self._body(gen, stream=False)) as resp:
                body = await resp.read()
                if resp.status != 200:
                    raise self._status_error(replica, resp.status, body)
            answer = _wire.completion_decoder.decode(body)
        except (TimeoutError, aiohttp.ClientError, msgspec.DecodeError) as exc:
            raise self._transport_error(replica, exc) from exc
        finally:
            replica.in_flight -= 1
        replica.observe(time.perf_counter() - started)
        choice = answer.choices[0]
        usage = answer.usage or _wire.WireUsage()
        return Completion(
            text=(choice.message.content if choice.message else None) or "",
            finish_reason=choice.finish_reason or "stop",
            usage=Usage(usage.prompt_tokens, usage.completion_tokens),
            model=answer.model or self._model,
        )

    async def stream(self, gen: Generation) -> AsyncIterator[Delta]:
        replica = self._pick()
        started = time.perf_counter()
        replica.in_flight += 1
        finish_reason = "stop"
        usage = Usage(0, 0)
        try:
            async with self._post(replica, self._body(gen, stream=True)) as resp:
                if resp.status != 200:
                    raise self._status_error(replica, resp.status, await resp.read())
                async for line in resp.content:
                    if not line.startswith(b"data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        break
                    chunk = _wire.chunk_decoder.decode(payload)
                    if chunk.usage is not None:
                        usage = Usage(chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
                    for choice in chunk.choices:
                        if choice.finish_reason:
                            finish_reason = choice.finish_reason
                        if choice.delta is not None and choice.delta.content:
                            yield Delta(text=choice.delta.content)
        except TierError:
            raise
        except (TimeoutError, aiohttp.ClientError, msgspec.DecodeError) as exc:
            raise self._transport_error(replica, exc) from exc
        finally:
            replica.in_flight -= 1
        replica.observe(time.perf_counter() - started)
        yield Delta(finish_reason=finish_reason, usage=usage)

    # -- internals ------------------------------------------------------------

    def _pick(self) -> Replica:
        healthy = [r for r in self._replicas if r.healthy]
        if not healthy:
            raise TierUnavailable(self.name, self.state().detail or "no healthy replica")
        least = min(r.in_flight for r in healthy)
        candidates = [r for r in healthy if r.in_flight == least]
        return candidates[next(self._next) % len(candidates)]

    def _post(self, replica: Replica, body: bytes) -> Any:
        if self._session is None:
            raise TierUnavailable(self.name, "not started")
        return self._session.post(replica.url + _CHAT_PATH, data=body, headers=_JSON_HEADERS)

    def _body(self, gen: Generation, *, stream: bool) -> bytes:
        body: dict[str, Any] = {"model": self._model, "messages": gen.messages, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        for key in ("max_tokens", "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty"):
            value = getattr(gen, key)
            if value is not None:
                body[key] = value
        if gen.stop:
            body["stop"] = gen.stop
        return _encode(body)

    def _status_error(self, replica: Replica, status: int, body: bytes) -> TierError:
        message = _wire.error_message(body)
        if 400 <= status < 500 and status not in (408, 429):
            return TierRejected(self.name, message)
        if status >= 500 or status in (408, 429):
            replica.last_error = f"HTTP {status}: {message}"
            return TierUnavailable(self.name, f"replica answered {status}: {message}")
        return TierFailed(self.name, f"unexpected status {status}: {message}")

    def _transport_error(self, replica: Replica, exc: BaseException) -> TierError:
        if isinstance(exc, TimeoutError):
            replica.last_error = "timeout"
            return TierTimeout(self.name, f"{replica.url} did not answer in time")
        if isinstance(exc, msgspec.DecodeError):
            return TierFailed(self.name, f"{replica.url} sent an unreadable answer: {exc}")
        replica.mark_down(str(exc) or type(exc).__name__)
        return TierUnavailable(self.name, f"{replica.url}: {exc}")

    async def _watch_health(self) -> None:
        while True:
            await asyncio.gather(*(self._check(r) for r in self._replicas))
            await asyncio.sleep(self._config.health_interval_s)

    async def _check(self, replica: Replica) -> None:
        assert self._session is not None
        try:
            async with self._session.get(
                replica.url + "/health", timeout=aiohttp.ClientTimeout(total=2.0)
            ) as resp:
                ok = resp.status == 200
            if ok and not self._model:
                self._model = await self._first_model(replica)
        except (TimeoutError, aiohttp.ClientError) as exc:
            ok = False
            replica.last_error = str(exc) or type(exc).__name__
        if ok and not replica.healthy:
            log.info("cloud replica %s is healthy", replica.url)
        elif not ok and replica.healthy:
            log.warning("cloud replica %s failed its health check", replica.url)
        replica.healthy = ok

    async def _first_model(self, replica: Replica) -> str:
        assert self._session is not None
        async with self._session.get(replica.url + "/v1/models") as resp:
            models = _wire.models_decoder.decode(await resp.read())
        return models.data[0].id if models.data else ""
