"""Admin API for the edge model registry: list versions, register one, activate (hot swap), roll back.

Admin keys only, like the cloud pool's routes.  Registry errors become OpenAI-shaped answers through the
error table (gateway/errors.py): an unknown version 404, a version that cannot be registered or loaded 400,
nothing to roll back to 409.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency

from gateway.accounts.tenants import Caller
from gateway.api.admin._guard import record, require_admin
from gateway.errors import InvalidRequest, NotFound
from gateway.services import Services
from gateway.wire.chat import encode
from tiers import ModelRegistry
from tiers.edge import EdgeModel

JSON = "application/json"


class ActivateBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str


async def _registry(
    request: Request[object, object, State], services: Services
) -> tuple[ModelRegistry[EdgeModel], Caller]:
    caller = await require_admin(request, services, "the edge models are")
    registry = services.edge_models
    if registry is None:
        raise NotFound("this gateway runs no edge tier")
    return registry, caller


def _active(registry: ModelRegistry[EdgeModel]) -> dict[str, Any]:
    models = registry.models()
    return {"active": models.get("active"), "previous": models.get("previous")}


def _body(raw: bytes, kind: type[msgspec.Struct]) -> msgspec.Struct:
    try:
        return msgspec.json.decode(raw or b"{}", type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequest(f"invalid request body: {exc}") from exc


def _listing(registry: ModelRegistry[EdgeModel], status: int = 200) -> Response[bytes]:
    return Response(encode(registry.models()), media_type=JSON, status_code=status)


@get("/admin/api/edge/models")
async def list_edge_models(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    registry, _ = await _registry(request, services)
    return _listing(registry)


@post("/admin/api/edge/models", status_code=201)
async def register_edge_model(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    registry, caller = await _registry(request, services)
    model = _body(await request.body(), EdgeModel)
    assert isinstance(model, EdgeModel)
    known = {m["name"] for m in registry.models()["data"]}
    registry.register(model)
    if model.name not in known:  # the same version registered again changes nothing
        await record(services, caller, "tier.model_registered", "edge_model", model.name, None, model)
    return _listing(registry, 201)


@post("/admin/api/edge/models/activate", status_code=200)
async def activate_edge_model(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    registry, caller = await _registry(request, services)
    body = _body(await request.body(), ActivateBody)
    assert isinstance(body, ActivateBody)
    before = _active(registry)
    await registry.activate(body.name)
    after = _active(registry)
    if after["active"] != before["active"]:
        await record(services, caller, "tier.swapped", "tier", "edge", before, after)
    return _listing(registry)


@post("/admin/api/edge/models/rollback", status_code=200)
async def rollback_edge_model(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    registry, caller = await _registry(request, services)
    before = _active(registry)
    await registry.rollback()
    await record(services, caller, "tier.rolled_back", "tier", "edge", before, _active(registry))
    return _listing(registry)


EDGE_ROUTES = [list_edge_models, register_edge_model, activate_edge_model, rollback_edge_model]
