"""The composition root: build every part from settings and wire them into one Litestar app."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import msgspec
from litestar import Litestar
from litestar.datastructures import State

import cache
import router
from gateway.accounts import Accounts
from gateway.activity import Activity
from gateway.admin import ADMIN_ROUTES
from gateway.admission import admit
from gateway.budgets import BudgetBook
from gateway.caching import AnswerCache
from gateway.chat import ChatService
from gateway.controllers import ROUTES
from gateway.errors import error_response
from gateway.metrics import Metrics
from gateway.request_id import before_send
from gateway.routing import RoutingService, tier_prices
from gateway.settings import Settings, SettingsError
from tiers import Pool, Tier
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


def create_app(
    settings: Settings,
    tiers: dict[str, Tier] | None = None,
    reload_settings: Callable[[], Settings] | None = None,
) -> Litestar:
    """Build the gateway.

    ``tiers`` replaces the configured ones (tests inject faulty tiers this way).  With
    ``reload_settings``, SIGHUP re-reads the settings and applies the cloud pool's membership
    (``cloud.urls``) without a restart: new replicas join, removed ones drain.
    """
    tiers = build_tiers(settings) if tiers is None else tiers
    pool = next((t for t in tiers.values() if isinstance(t, Pool)), None)
    tiers = admit(tiers, settings.admission)
    metrics = Metrics()
    store = cache.open_store(settings.cache, settings.data_path) if settings.cache.enabled else None

    def breaker_changed(tier: str, modality: object, state: router.BreakerState) -> None:
        log.warning("circuit breaker %s/%s is now %s", tier, modality, state.value)
        metrics.breaker_transitions.labels(tier, str(modality), state.value).inc()

    routing = RoutingService(
        settings.router, settings.routing, tier_prices(settings.pricing.prices, tiers), settings.data_path
    )
    chat = ChatService(
        tiers,
        settings.routing,
        metrics,
        answers=AnswerCache(settings.cache, store, settings.routing, metrics),
        breakers=router.BreakerBoard(settings.breakers, on_transition=breaker_changed),
        fail_instead_of_degrade=settings.degradation.fail_instead,
        routing=routing,
    )
    activity = Activity(settings.admin_ui.recent_decisions)
    accounts = Accounts(settings, chat, activity)

    def reload_pool() -> None:
        assert reload_settings is not None and pool is not None
        try:
            urls = reload_settings().cloud.urls
        except SettingsError as exc:
            log.error("SIGHUP: settings not reloaded: %s", exc)
            return
        if urls:
            log.info("SIGHUP: cloud pool members are now %s", urls)
            pool.set_members(urls)
        else:
            log.warning("SIGHUP: cloud.urls is empty; the pool keeps its members")

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        settings.data_path.mkdir(parents=True, exist_ok=True)
        await accounts.start()
        budgets = BudgetBook(accounts.engine, accounts.policies.policy, settings.router.budget_refresh_s)
        routing.bind(accounts.policies.policy, budgets)
        await budgets.start()
        await routing.start()
        await asyncio.gather(*(tier.start() for tier in tiers.values()))
        if reload_settings is not None and pool is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_pool)
        log.info("tiergate ready to accept requests; tiers: %s", chat.tier_states())
        try:
            yield
        finally:
            log.info("tiergate stopping its tiers")
            await asyncio.gather(*(tier.aclose() for tier in tiers.values()), return_exceptions=True)
            await chat.aclose()
            await routing.aclose()
            await budgets.aclose()
            await accounts.aclose()

    # Imported here: the admin UI is built on the gateway's packages (admin_ui → gateway), not the other way.
    from admin_ui import create_admin_ui, template_config

    admin_ui = [create_admin_ui(settings.admin_ui)] if settings.admin_ui.enabled else []
    return Litestar(
        route_handlers=[*ROUTES, *ADMIN_ROUTES, *admin_ui],
        template_config=template_config() if admin_ui else None,
        lifespan=[lifespan],
        state=State(
            {
                "chat": chat,
                "accounts": accounts,
                "metrics": metrics,
                "settings": settings,
                "pool": pool,
                "activity": activity,
                "routing": routing,
            }
        ),
        exception_handlers={Exception: error_response},
        before_send=[before_send(metrics)],
        request_max_body_size=settings.server.max_body_bytes,
        openapi_config=None,
        debug=False,
    )
