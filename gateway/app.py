"""The composition root: build every part from settings and wire them into one Litestar app."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
from litestar import Litestar
from litestar.datastructures import State

from gateway.chat import ChatService
from gateway.controllers import ROUTES
from gateway.errors import error_response
from gateway.metrics import Metrics
from gateway.request_id import before_send
from gateway.settings import Settings
from tiers import Tier
from tiers.cloud import VLLMPool
from tiers.edge import LlamaCppTier, OnnxTier

log = logging.getLogger(__name__)


def build_tiers(settings: Settings) -> dict[str, Tier]:
    tiers: dict[str, Tier] = {}
    if settings.edge.enabled:
        edge = settings.edge_config()
        tiers["edge"] = OnnxTier(edge) if edge.backend == "onnx" else LlamaCppTier(edge)
    if settings.cloud.enabled:
        cloud = msgspec.structs.replace(settings.cloud, local=settings.local_vllm())
        tiers["cloud"] = VLLMPool(cloud, log_dir=str(settings.data_path / "logs"))
    return tiers


def create_app(settings: Settings, tiers: dict[str, Tier] | None = None) -> Litestar:
    """Build the gateway. ``tiers`` replaces the configured ones (tests inject faulty tiers this way)."""
    tiers = build_tiers(settings) if tiers is None else tiers
    metrics = Metrics()
    chat = ChatService(tiers, settings.routing, metrics)

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        settings.data_path.mkdir(parents=True, exist_ok=True)
        await asyncio.gather(*(tier.start() for tier in tiers.values()))
        log.info("tiergate ready to accept requests; tiers: %s", chat.tier_states())
        try:
            yield
        finally:
            log.info("tiergate stopping its tiers")
            await asyncio.gather(*(tier.aclose() for tier in tiers.values()), return_exceptions=True)

    return Litestar(
        route_handlers=ROUTES,
        lifespan=[lifespan],
        state=State({"chat": chat, "metrics": metrics, "settings": settings}),
        exception_handlers={Exception: error_response},
        before_send=[before_send(metrics)],
        request_max_body_size=settings.server.max_body_bytes,
        openapi_config=None,
        debug=False,
    )
