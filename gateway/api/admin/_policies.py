"""Admin API for tenant routing policies: read, replace, history, rollback.

    GET  /admin/api/tenants/{name}/policy            the policy in force (own, else the default)
    PUT  /admin/api/tenants/{name}/policy            replace it (admin key); ``If-Match: <version>``
                                                     refuses with 409 if it changed meanwhile
    GET  /admin/api/tenants/{name}/policy/history    every version, newest first (?limit=)
    POST /admin/api/tenants/{name}/policy/rollback   {"version": N}: set version N's policy again
    ...  /admin/api/policies/default[/history|/rollback]  the same for the default policy

A tenant's key may read its own policy and history; changing one takes an admin key or the tenant's
tenant-admin key (:mod:`gateway.accounts.tenants._access`: the rule the admin UI applies to people too).
A change takes effect on this gateway's next request, on others within policies.refresh_s.
"""

from __future__ import annotations

import asyncio

import msgspec
from litestar import Request, Response, get, post, put
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery

import router
from gateway.accounts.admin import actor_of
from gateway.accounts.policies import DEFAULT_KEY, PolicyBook
from gateway.accounts.tenants import Caller, check_change, check_read
from gateway.errors import InvalidRequest, to_gateway_error
from gateway.services import Services
from gateway.wire.chat import encode

JSON = "application/json"


class RollbackBody(msgspec.Struct, forbid_unknown_fields=True):
    version: int


def who(caller: Caller) -> str:
    """How a change is attributed in the history."""
    return f"{caller.role}:{caller.key_id}"


async def _policies(
    request: Request[object, object, State], services: Services, tenant: str | None, *, write: bool = False
) -> tuple[PolicyBook, Caller, str]:
    caller = await services.auth.caller(request.headers)
    if tenant is None:  # the default policy: a tenant's key reads it (its routing falls back to it)
        if write:
            check_change(caller, None, "the default policy is")
        return services.policies, caller, DEFAULT_KEY
    (check_change if write else check_read)(caller, tenant, "a tenant's policy is")
    await asyncio.to_thread(services.tenants.tenant, tenant)  # 404 for an unknown tenant
    return services.policies, caller, tenant


def _json(value: object, status: int = 200) -> Response[bytes]:
    return Response(encode(value), media_type=JSON, status_code=status)


def _expected_version(request: Request[object, object, State]) -> int | None:
    tag = request.headers.get("if-match")
    if tag is None:
        return None
    try:
        return int(tag.strip().strip('"'))
    except ValueError as exc:
        raise InvalidRequest("If-Match must be the policy's version number", param="If-Match") from exc


async def _read(
    request: Request[object, object, State], services: Services, tenant: str | None
) -> Response[bytes]:
    book, _, key = await _policies(request, services, tenant)
    record = await book.get(key)
    return _json(record)


async def _write(
    request: Request[object, object, State], services: Services, tenant: str | None
) -> Response[bytes]:
    book, caller, key = await _policies(request, services, tenant, write=True)
    try:
        policy = router.decode_policy(await request.body() or b"{}")
    except router.PolicyInvalid as exc:
        raise to_gateway_error(exc) from exc
    expected = _expected_version(request)
    return _json(await book.set(key, policy, who(caller), expected, actor=actor_of(caller)))


async def _history(
    request: Request[object, object, State], services: Services, tenant: str | None, limit: int
) -> Response[bytes]:
    if not 1 <= limit <= 1000:
        raise InvalidRequest("limit must be between 1 and 1000", param="limit")
    book, _, key = await _policies(request, services, tenant)
    return _json({"data": await book.history(key, limit)})


async def _rollback(
    request: Request[object, object, State], services: Services, tenant: str | None
) -> Response[bytes]:
    book, caller, key = await _policies(request, services, tenant, write=True)
    try:
        body = msgspec.json.decode(await request.body() or b"{}", type=RollbackBody)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise InvalidRequest(f"invalid request body: {exc}", param="version") from exc
    return _json(await book.rollback(key, body.version, who(caller), actor=actor_of(caller)))


@get("/admin/api/tenants/{name:str}/policy")
async def get_policy(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    return await _read(request, services, name)


@put("/admin/api/tenants/{name:str}/policy")
async def put_policy(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    return await _write(request, services, name)


@get("/admin/api/tenants/{name:str}/policy/history")
async def policy_history(
    request: Request[object, object, State],
    services: NamedDependency[Services],
    name: FromPath[str],
    limit: FromQuery[int] = 100,
) -> Response[bytes]:
    return await _history(request, services, name, limit)


@post("/admin/api/tenants/{name:str}/policy/rollback", status_code=200)
async def rollback_policy(
    request: Request[object, object, State], services: NamedDependency[Services], name: FromPath[str]
) -> Response[bytes]:
    return await _rollback(request, services, name)


@get("/admin/api/policies/default")
async def get_default_policy(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    return await _read(request, services, None)


@put("/admin/api/policies/default")
async def put_default_policy(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    return await _write(request, services, None)


@get("/admin/api/policies/default/history")
async def default_policy_history(
    request: Request[object, object, State], services: NamedDependency[Services], limit: FromQuery[int] = 100
) -> Response[bytes]:
    return await _history(request, services, None, limit)


@post("/admin/api/policies/default/rollback", status_code=200)
async def rollback_default_policy(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    return await _rollback(request, services, None)


POLICY_ROUTES = [
    get_policy,
    put_policy,
    policy_history,
    rollback_policy,
    get_default_policy,
    put_default_policy,
    default_policy_history,
    rollback_default_policy,
]
