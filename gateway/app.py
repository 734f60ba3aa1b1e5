"""The composition root: build every part from settings and wire them into one Litestar app."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import msgspec
from litestar import Litestar
from litestar.datastructures import State
from prometheus_client import disable_created_metrics

import cache
import router
from gateway.accounts.budgets import BudgetBook
from gateway.accounts.service import Accounts
from gateway.api.admin import ADMIN_ROUTES
from gateway.api.controllers import ROUTES
from gateway.api.openapi import OPENAPI_ROUTES
from gateway.errors import error_response
from gateway.media import MediaMetrics, MediaPipeline, MediaTargets
from gateway.ops.activity import Activity
from gateway.ops.metrics import Metrics
from gateway.ops.observe import Observer, live_gauges
from gateway.ops.scaling import ReplicaSignal, run_signal
from gateway.ops.shared import SharedPool, open_shared
from gateway.ops.tracing import Tracing
from gateway.pipeline.admission import admit
from gateway.pipeline.caching import AnswerCache
from gateway.pipeline.chat import ChatService
from gateway.pipeline.routing import RoutingService, tier_prices
from gateway.settings import Settings, SettingsError
from tiers import Modality, Pool, Tier
from tiers.cloud import VLLMPool
from tiers.edge import EdgeRegistry

log = logging.getLogger(__name__)


def build_tiers(settings: Settings) -> dict[str, Tier]:
    tiers: dict[str, Tier] = {}
    if settings.edge.enabled:
        tiers["edge"] = EdgeRegistry(settings.edge_config())
    if settings.cloud.enabled:
        cloud = msgspec.structs.replace(settings.cloud, local=settings.local_vllm())
        tiers["cloud"] = VLLMPool(cloud, log_dir=str(settings.data_path / "logs"))
    return tiers


def media_targets(tiers: dict[str, Tier]) -> MediaTargets:
    """How media are normalised: for the most any tier takes (each tier's limits are checked later)."""
    caps = [t.capabilities for t in tiers.values()]
    pixels = [c.limits.max_image_pixels for c in caps if Modality.IMAGE in c.modalities]
    return MediaTargets(
        image_max_pixels=None if not pixels or None in pixels else max(p for p in pixels if p is not None),
        audio=any(Modality.AUDIO in c.modalities for c in caps),
    )


def create_app(
    settings: Settings,
    tiers: dict[str, Tier] | None = None,
    reload_settings: Callable[[], Settings] | None = None,
    tracing: Tracing | None = None,
) -> Litestar:
    """Build the gateway.

    ``tiers`` replaces the configured ones (tests inject faulty tiers this way), ``tracing`` the
    one ``observability.otlp_endpoint`` makes (tests export to memory).  With ``reload_settings``,
    SIGHUP re-reads the settings and applies the cloud pool's membership (``cloud.urls``) without a
    restart: new replicas join, removed ones drain.
    """
    tiers = build_tiers(settings) if tiers is None else tiers
    pool = next((t for t in tiers.values() if isinstance(t, Pool)), None)
    edge_models = next((t for t in tiers.values() if isinstance(t, EdgeRegistry)), None)
    obs = settings.observability
    # No *_created series: they double /metrics for nothing Prometheus uses.  (The function has no
    # annotations in prometheus_client.)
    disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = Metrics(enabled=obs.metrics)
    tracing = tracing or Tracing(obs.otlp_endpoint, obs.service_name)
    tiers = admit(tiers, settings.admission, metrics)
    store = cache.open_store(settings.cache, settings.data_path) if settings.cache.enabled else None

    shared = open_shared(settings)

    def breaker_changed(tier: str, modality: Modality, state: router.BreakerState) -> None:
        log.warning("circuit breaker %s/%s is now %s", tier, modality, state.value)
        metrics.breaker_transitions.labels(tier, str(modality), state.value).inc()
        if shared is not None:
            shared.breaker_changed(tier, modality, state)

    breakers = router.BreakerBoard(settings.breakers, on_transition=breaker_changed)

    routing = RoutingService(
        settings.router, settings.routing, tier_prices(settings.pricing.prices, tiers), settings.data_path
    )
    chat = ChatService(
        tiers,
        settings.routing,
        metrics,
        answers=AnswerCache(settings.cache, store, settings.routing, metrics),
        breakers=breakers,
        fail_instead_of_degrade=settings.degradation.fail_instead,
        tracing=tracing,
        routing=routing,
    )
    media = None
    if settings.media.enabled:
        media = MediaPipeline(
            settings.media, settings.data_path, media_targets(tiers), metrics=MediaMetrics(metrics)
        )
    activity = Activity(settings.admin_ui.recent_decisions)
    accounts = Accounts(settings, chat, media, activity)
    observer = Observer(
        obs, metrics, tracing, priority_tenants=settings.admission.priority_tenants, models=chat.model_names
    )
    metrics.on_scrape(live_gauges(tiers, chat.breaker_states))
    metrics.on_scrape(accounts.scrape)
    signal_task: asyncio.Task[None] | None = None

    def reload_pool() -> None:
        apply_reload()
        if shared is not None:
            shared.reloaded()

    def apply_reload() -> None:
        if reload_settings is None or pool is None:
            return
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
        if media is not None:
            await media.start()
        if shared is not None:
            shared.attach(breakers, pool, apply_reload)
            await shared.start()
        if reload_settings is not None and pool is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_pool)
        nonlocal signal_task
        if settings.scaling.enabled and "cloud" in tiers:
            scaler = ReplicaSignal(settings.scaling)
            signal_task = asyncio.create_task(run_signal(scaler, tiers["cloud"], metrics), name="scaling")
        # Start-up leaves about a million long-lived objects (models, libraries, the app). Left in
        # the collector's oldest generation, each full collection walks them all: 50-85 ms with the
        # event loop stopped, every minute or so under load. Frozen, they are never walked again.
        gc.collect()
        gc.freeze()
        log.info("tiergate ready to accept requests; tiers: %s", chat.tier_states())
        try:
            yield
        finally:
            log.info("tiergate stopping its tiers")
            if signal_task is not None:
                signal_task.cancel()
            await asyncio.gather(*(tier.aclose() for tier in tiers.values()), return_exceptions=True)
            await chat.aclose()
            await routing.aclose()
            await budgets.aclose()
            await accounts.aclose()
            tracing.shutdown()
            if media is not None:
                await media.aclose()
            if shared is not None:
                await shared.aclose()

    # Imported here: the admin UI is built on the gateway's packages (admin_ui → gateway), not the other way.
    from admin_ui import create_admin_ui, template_config

    admin_ui = [create_admin_ui(settings.admin_ui)] if settings.admin_ui.enabled else []
    return Litestar(
        route_handlers=[*ROUTES, *ADMIN_ROUTES, *OPENAPI_ROUTES, *admin_ui],
        template_config=template_config() if admin_ui else None,
        lifespan=[lifespan],
        state=State(
            {
                "chat": chat,
                "accounts": accounts,
                "metrics": metrics,
                "observer": observer,
                "settings": settings,
                "pool": SharedPool(pool, shared) if shared is not None and pool is not None else pool,
                "edge_models": edge_models,
                "activity": activity,
                "routing": routing,
            }
        ),
        exception_handlers={Exception: error_response},
        middleware=[observer.middleware] if observer.needs_middleware else [],
        before_send=[observer.before_send()],
        request_max_body_size=settings.server.max_body_bytes,
        logging_config=None,  # logging is set up once, by gateway.ops.logs (JSON or text, with request ids)
        openapi_config=None,
        debug=False,
    )
