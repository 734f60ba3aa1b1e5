"""Admin API for the learned router: its predictors' state and errors, and a refit on demand.

GET  /admin/api/router          per tier: samples, fit time, held-out and live MAPE, online
                                correction; the difficulty model's source and accuracy
POST /admin/api/router/refit    refit every tier now, wait, save (``tiergate calibrate`` uses it)
GET  /admin/api/quality         per tenant and tier: the labels the quality model learned from (how
                                many, the share good, per hour) and by what source (``?tenant=``)
"""

from __future__ import annotations

from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency

from gateway.api.admin._guard import require_admin
from gateway.pipeline.routing_service import RoutingService
from gateway.services import Services
from gateway.wire.chat import encode

JSON = "application/json"


async def _routing(request: Request[object, object, State], services: Services) -> RoutingService:
    await require_admin(request, services, "the router is")
    routing: RoutingService = services.routing
    return routing


@get("/admin/api/router")
async def router_state(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    routing = await _routing(request, services)
    return Response(encode(routing.report()), media_type=JSON)


@post("/admin/api/router/refit", status_code=200)
async def router_refit(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    routing = await _routing(request, services)
    return Response(encode(await routing.refit_now()), media_type=JSON)


@get("/admin/api/quality")
async def quality(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    routing = await _routing(request, services)
    tenant = request.query_params.get("tenant") or None
    sources = services.outcomes.report(tenant) if services.outcomes is not None else []
    body = {"tiers": routing.quality(tenant), "sources": sources}
    return Response(encode(body), media_type=JSON)


ROUTER_ROUTES = [router_state, router_refit, quality]
