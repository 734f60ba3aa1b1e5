"""Admin API for the cloud pool's membership: list, replace, drain (admin keys only)."""

from __future__ import annotations

import msgspec
from litestar import Request, Response, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath

from gateway.api.admin._guard import require_admin
from gateway.errors import InvalidRequest, NotFound
from gateway.ops.shared import check_replica_urls
from gateway.services import Services
from gateway.wire.chat import encode
from tiers import Pool

JSON = "application/json"


class MembersBody(msgspec.Struct, forbid_unknown_fields=True):
    urls: list[str]


async def _pool(request: Request[object, object, State], services: Services) -> Pool:
    await require_admin(request, services, "the cloud pool is")
    pool: Pool | None = services.pool
    if pool is None:
        raise NotFound("this gateway has no cloud pool")
    return pool


@get("/admin/api/cloud/replicas")
async def list_replicas(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    return Response(encode((await _pool(request, services)).replicas()), media_type=JSON)


@put("/admin/api/cloud/replicas")
async def set_replicas(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    pool = await _pool(request, services)
    try:
        body = msgspec.json.decode(await request.body(), type=MembersBody)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequest(f"invalid request body: {exc}") from exc
    try:
        urls = check_replica_urls(body.urls)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="urls") from exc
    pool.set_members(urls)
    return Response(encode(pool.replicas()), media_type=JSON)


@post("/admin/api/cloud/replicas/{name:str}/drain", status_code=200)
async def drain_replica(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    pool = await _pool(request, services)
    if not pool.drain(name):
        raise NotFound(f"no replica named {name!r}")
    return Response(encode(pool.replicas()), media_type=JSON)


POOL_ROUTES = [list_replicas, set_replicas, drain_replica]
