"""Admin API for the cloud pool's membership: list, replace, drain (admin keys only)."""

from __future__ import annotations

import msgspec
from litestar import Request, Response, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath

from gateway.accounts.tenants import Caller
from gateway.api.admin._guard import record, require_admin
from gateway.errors import InvalidRequest, NotFound
from gateway.ops.shared import check_replica_urls
from gateway.services import Services
from gateway.wire.chat import encode
from tiers import Pool

JSON = "application/json"


class MembersBody(msgspec.Struct, forbid_unknown_fields=True):
    urls: list[str]


async def _pool(request: Request[object, object, State], services: Services) -> tuple[Pool, Caller]:
    caller = await require_admin(request, services, "the cloud pool is")
    pool: Pool | None = services.pool
    if pool is None:
        raise NotFound("this gateway has no cloud pool")
    return pool, caller


def _urls(pool: Pool) -> list[str]:
    return [str(r["url"]) for r in pool.replicas()]


@get("/admin/api/cloud/replicas")
async def list_replicas(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    pool, _ = await _pool(request, services)
    return Response(encode(pool.replicas()), media_type=JSON)


@put("/admin/api/cloud/replicas")
async def set_replicas(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    pool, caller = await _pool(request, services)
    try:
        body = msgspec.json.decode(await request.body(), type=MembersBody)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequest(f"invalid request body: {exc}") from exc
    try:
        urls = check_replica_urls(body.urls)
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="urls") from exc
    before = _urls(pool)
    pool.set_members(urls)
    if before != urls:
        await record(services, caller, "tier.members_set", "tier", "cloud", {"urls": before}, {"urls": urls})
    return Response(encode(pool.replicas()), media_type=JSON)


@post("/admin/api/cloud/replicas/{name:str}/drain", status_code=200)
async def drain_replica(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    pool, caller = await _pool(request, services)
    before = next((r for r in pool.replicas() if r.get("name") == name), None)
    if not pool.drain(name):
        raise NotFound(f"no replica named {name!r}")
    after = next((r for r in pool.replicas() if r.get("name") == name), None)
    await record(services, caller, "tier.drained", "replica", name, before, after)
    return Response(encode(pool.replicas()), media_type=JSON)


POOL_ROUTES = [list_replicas, set_replicas, drain_replica]
