"""``/v1/batches``: OpenAI's Batch API, per tenant.  A create validates the input file at once (a bad
line is kept for the error file; a file that cannot be a batch fails it, with ``errors``); the lines
are run by :mod:`gateway.api.batches.runner` on the capacity interactive requests leave idle."""

from __future__ import annotations

import asyncio

import msgspec
from litestar import Request, Response, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath

from gateway.accounts.batches import ENDPOINTS
from gateway.api.batches.files import store_of, tenant_of
from gateway.api.batches.objects import BatchPage, CreateBatch, batch_object, page
from gateway.errors import InvalidRequest, PermissionDenied
from gateway.services import Services
from gateway.wire.chat import encode
from gateway.wire.decoding import decode_error

JSON = "application/json"


@post("/v1/batches", status_code=200)
async def create_batch(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    caller = await services.auth.caller(request.headers)
    if caller.tenant is None:
        raise PermissionDenied("admin keys manage tenants; create batches with a tenant's key")
    try:
        asked = msgspec.json.decode(await request.body(), type=CreateBatch)
    except msgspec.ValidationError as exc:
        raise decode_error(exc) from exc
    except msgspec.DecodeError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from exc
    if asked.endpoint not in ENDPOINTS:
        names = ", ".join(ENDPOINTS)
        raise InvalidRequest(
            f"endpoint must be one of {names}, not {asked.endpoint[:64]!r}", param="endpoint"
        )
    store = store_of(services)
    record = await asyncio.to_thread(
        store.create, caller.tenant.name, caller.key_id, asked.input_file_id, asked.endpoint, asked.metadata
    )
    return Response(encode(batch_object(record)), media_type=JSON)


@get("/v1/batches/{batch_id:str}")
async def retrieve_batch(
    request: Request[object, object, State], services: NamedDependency[Services], batch_id: FromPath[str]
) -> Response[bytes]:
    record = await asyncio.to_thread(store_of(services).get, await tenant_of(request, services), batch_id)
    return Response(encode(batch_object(record)), media_type=JSON)


@get("/v1/batches")
async def list_batches(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    tenant = await tenant_of(request, services)
    try:
        asked = msgspec.convert(dict(request.query_params), BatchPage, strict=False)
    except msgspec.ValidationError as exc:
        raise decode_error(exc) from exc
    found, more = await asyncio.to_thread(store_of(services).listed, tenant, asked.limit, asked.after)
    return Response(encode(page([batch_object(b) for b in found], more)), media_type=JSON)


@post("/v1/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_batch(
    request: Request[object, object, State], services: NamedDependency[Services], batch_id: FromPath[str]
) -> Response[bytes]:
    record = await asyncio.to_thread(store_of(services).cancel, await tenant_of(request, services), batch_id)
    return Response(encode(batch_object(record)), media_type=JSON)


BATCH_ROUTES = [create_batch, retrieve_batch, list_batches, cancel_batch]
