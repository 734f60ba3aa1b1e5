"""The Litestar app: routes, middleware, error handling and the services' dependencies.

The services themselves are built by :func:`gateway.services.open_services`, in the app's
lifespan; handlers receive them as typed dependencies (``services: Services``), provided from
that one object.  Plugins registered under the ``tiergate.plugins`` entry-point group (the admin
UI is one) add their own routes: the gateway never imports them.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import entry_points
from typing import cast

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.plugins import PluginProtocol
from litestar.types import ASGIApp
from prometheus_client import disable_created_metrics

from gateway.api.admin import ADMIN_ROUTES
from gateway.api.batches import running_batches
from gateway.api.controllers import ROUTES
from gateway.api.openapi import OPENAPI_ROUTES
from gateway.errors import error_response
from gateway.ops.clients import ASGIApp as ClientApp
from gateway.ops.clients import ClientAddressMiddleware, proxy_networks
from gateway.ops.metrics import Metrics
from gateway.ops.observe import Observer
from gateway.ops.tracing import Tracing
from gateway.pipeline.tierset import AUTO_MODEL
from gateway.services import Services, build_tiers, open_services, services_of
from gateway.settings import Settings
from tiers import Tier

log = logging.getLogger(__name__)

PLUGIN_GROUP = "tiergate.plugins"


def plugins(settings: Settings) -> list[PluginProtocol]:
    """Each installed plugin's factory, called with the settings; one that returns None is off."""
    found = []
    for entry in entry_points(group=PLUGIN_GROUP):
        plugin = entry.load()(settings)
        if plugin is not None:
            found.append(plugin)
    return found


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
    obs = settings.observability
    # No *_created series: they double /metrics for nothing Prometheus uses.  (The function has no
    # annotations in prometheus_client.)
    disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = Metrics(enabled=obs.metrics)
    tracing = tracing or Tracing(obs.otlp_endpoint, obs.service_name)
    tiers = build_tiers(settings) if tiers is None else tiers
    observer = Observer(
        obs,
        metrics,
        tracing,
        priority_tenants=settings.admission.priority_tenants,
        models=[
            AUTO_MODEL,
            *tiers,
            settings.embedding.model,
            *settings.embedding.aliases,
            settings.speech.model,
            *settings.speech.aliases,
        ],
    )

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        async with (
            open_services(settings, observer, tiers, reload_settings) as services,
            running_batches(services),
        ):
            app.state.services = services
            # Start-up leaves about a million long-lived objects (models, libraries, the app). Left in
            # the collector's oldest generation, each full collection walks them all: 50-85 ms with the
            # event loop stopped, every minute or so under load. Frozen, they are never walked again.
            gc.collect()
            gc.freeze()
            yield

    proxies = proxy_networks(settings.server.trusted_proxies)

    def client_address(app: ASGIApp) -> ASGIApp:
        return cast(ASGIApp, ClientAddressMiddleware(cast(ClientApp, app), proxies))

    def provide_services(state: State) -> Services:
        return services_of(state)

    return Litestar(
        route_handlers=[*ROUTES, *ADMIN_ROUTES, *OPENAPI_ROUTES],
        dependencies={"services": Provide(provide_services, sync_to_thread=False)},
        plugins=plugins(settings),
        lifespan=[lifespan],
        exception_handlers={Exception: error_response},
        # Outermost: the client's address and scheme (trusted proxies) for everything inside.
        middleware=[client_address, *([observer.middleware] if observer.needs_middleware else [])],
        before_send=[observer.before_send()],
        request_max_body_size=settings.server.max_body_bytes,
        logging_config=None,  # logging is set up once, by gateway.ops.logs (JSON or text, with request ids)
        openapi_config=None,
        debug=False,
    )


__all__ = ["PLUGIN_GROUP", "create_app", "plugins"]
