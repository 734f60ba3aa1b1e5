"""Probes of the pool's replicas, off the request path: health, the engine's load, the model served.

They use aiohttp, whose cost per call does not matter here (requests go through :mod:`tiers.cloud._http`).
"""

from __future__ import annotations

import aiohttp

from tiers.cloud import _wire
from tiers.cloud._replica import Replica, parse_engine_load

_PROBE_TIMEOUT = aiohttp.ClientTimeout(total=2.0)


class Prober:
    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=8, ttl_dns_cache=300), raise_for_status=False
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def health(self, replica: Replica, *, model: bool) -> tuple[bool, str, str]:
        """Whether ``/health`` answers 200, why not, and (``model``: when it does) the first model
        ``/v1/models`` lists."""
        assert self._session is not None
        try:
            async with self._session.get(replica.url + "/health", timeout=_PROBE_TIMEOUT) as resp:
                ok = resp.status == 200
            served = await self._first_model(replica) if ok and model else ""
            return ok, "" if ok else f"/health answered {resp.status}", served
        except (TimeoutError, aiohttp.ClientError) as exc:
            return False, str(exc) or type(exc).__name__, ""

    async def scrape(self, replica: Replica) -> None:
        """Read the replica's engine load from its ``/metrics``."""
        assert self._session is not None
        try:
            async with self._session.get(replica.url + "/metrics", timeout=_PROBE_TIMEOUT) as resp:
                if resp.status == 200:
                    replica.scraped(parse_engine_load(await resp.text()))
        except (TimeoutError, aiohttp.ClientError):
            pass  # health checks decide availability; a missed scrape keeps the last reading

    async def _first_model(self, replica: Replica) -> str:
        assert self._session is not None
        async with self._session.get(replica.url + "/v1/models", timeout=_PROBE_TIMEOUT) as resp:
            models = _wire.models_decoder.decode(await resp.read())
        return models.data[0].id if models.data else ""
