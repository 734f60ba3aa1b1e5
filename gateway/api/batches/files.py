"""``/v1/files``: OpenAI's Files API, for what batches need (``purpose=batch``), per tenant.

An upload is a multipart form read as it streams in (python-multipart, fed the body's chunks): the
``file`` part goes straight to disk through :class:`~gateway.accounts.batches.Upload`, bounded by
``batch.max_file_bytes`` and ``batch.max_lines``, so a 200 MB file costs the gateway a few KiB of
memory; the other fields are held to 64 KiB.  Content is sent back from disk in 64 KiB pieces.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.params import FromPath
from litestar.response import Stream
from python_multipart import MultipartParser
from python_multipart.exceptions import MultipartParseError

from gateway.accounts.batches import BatchStore, Upload
from gateway.api.batches.objects import PURPOSES, FilePage, file_object, page
from gateway.errors import InvalidRequest, NotFound, PermissionDenied
from gateway.services import Services
from gateway.wire.chat import encode
from gateway.wire.decoding import decode_error

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

JSON = "application/json"
MAX_FIELD_BYTES = 65_536
MAX_PARTS = 8


def store_of(services: Services) -> BatchStore:
    if services.batches is None:
        raise NotFound("the Files and Batch APIs are off here (batch.enabled = false)")
    return services.batches


async def tenant_of(request: Request[object, object, State], services: Services) -> str:
    """The tenant whose files and batches the caller's key reads (an admin key has none)."""
    caller = await services.auth.caller(request.headers)
    if caller.tenant is None:
        raise PermissionDenied("admin keys manage tenants; use files and batches with a tenant's key")
    return caller.tenant.name


def _boundary(content_type: str) -> bytes:
    kind, _, params = content_type.partition(";")
    if kind.strip().lower() != "multipart/form-data":
        raise InvalidRequest(f"send the file as multipart/form-data, not {kind.strip() or 'nothing'}")
    for param in params.split(";"):
        name, _, value = param.strip().partition("=")
        if name.lower() == "boundary" and value.strip('"'):
            return value.strip('"').encode("latin-1")
    raise InvalidRequest("the multipart/form-data Content-Type names no boundary")


class _Form:
    """The form's callbacks: the file part into ``upload``, the other fields kept (bounded)."""

    def __init__(self, upload: Upload) -> None:
        self.upload = upload
        self.fields: dict[str, str] = {}
        self.filename = ""
        self.has_file = False
        self._parts = 0
        self._name = ""
        self._header = b""
        self._buf = bytearray()

    def callbacks(self) -> dict[str, Any]:
        return {
            "on_part_begin": self._begin,
            "on_part_data": self._data,
            "on_part_end": self._end,
            "on_header_field": self._field,
            "on_header_value": self._value,
            "on_header_end": self._header_end,
        }

    def _begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise InvalidRequest(f"the form has over {MAX_PARTS} parts")
        self._name, self._buf = "", bytearray()

    def _field(self, data: bytes, start: int, end: int) -> None:
        self._header += data[start:end]

    def _value(self, data: bytes, start: int, end: int) -> None:
        if self._header.lower() != b"content-disposition":
            return
        for item in data[start:end].decode("utf-8", "replace").split(";")[1:]:
            key, _, raw = item.strip().partition("=")
            if key.lower() == "name":
                self._name = raw.strip().strip('"')
            elif key.lower() == "filename":
                self.filename = raw.strip().strip('"')

    def _header_end(self) -> None:
        self._header = b""

    def _data(self, data: bytes, start: int, end: int) -> None:
        if self._name == "file":
            if self.has_file:
                raise InvalidRequest("the form has more than one file", param="file")
            self.upload.write(data[start:end])
            return
        self._buf += data[start:end]
        if len(self._buf) > MAX_FIELD_BYTES:
            raise InvalidRequest(f"form field {self._name!r} is over {MAX_FIELD_BYTES} bytes")

    def _end(self) -> None:
        if self._name == "file":
            self.has_file = True
        elif self._name:
            self.fields[self._name] = bytes(self._buf).decode("utf-8", "replace")


def _purpose(form: _Form) -> str:
    unknown = sorted(set(form.fields) - {"purpose"})
    if unknown:
        raise InvalidRequest(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
    if not form.has_file:
        raise InvalidRequest("the form has no 'file' part", param="file")
    purpose = form.fields.get("purpose")
    if purpose is None:
        raise InvalidRequest("Missing required parameter: 'purpose'.", param="purpose")
    if purpose not in PURPOSES:
        listed = ", ".join(repr(p) for p in PURPOSES)
        raise InvalidRequest(f"{purpose[:64]!r} is not one of [{listed}] - 'purpose'", param="purpose")
    if purpose != "batch":
        raise InvalidRequest(
            f"this gateway keeps files for batches only: purpose must be 'batch', not {purpose!r}",
            param="purpose",
        )
    return purpose


@post("/v1/files", request_max_body_size=None, status_code=200)
async def create_file(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    """The body is streamed: its length is bounded by ``batch.max_file_bytes`` as it is written."""
    tenant = await tenant_of(request, services)
    store = store_of(services)
    boundary = _boundary(request.headers.get("content-type", ""))
    upload = store.files.upload()
    form = _Form(upload)
    parser = MultipartParser(boundary, cast("MultipartCallbacks", form.callbacks()))
    try:
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
        purpose = _purpose(form)
        record = await asyncio.to_thread(
            store.files.keep, upload, tenant, form.filename or "upload.jsonl", purpose
        )
    except MultipartParseError as exc:
        upload.discard()
        raise InvalidRequest(f"malformed multipart form: {exc}") from exc
    except BaseException:
        upload.discard()
        raise
    return Response(encode(file_object(record)), media_type=JSON)


@get("/v1/files")
async def list_files(
    request: Request[object, object, State], services: NamedDependency[Services]
) -> Response[bytes]:
    tenant = await tenant_of(request, services)
    try:
        asked = msgspec.convert(dict(request.query_params), FilePage, strict=False)
    except msgspec.ValidationError as exc:
        raise decode_error(exc) from exc
    files, more = await asyncio.to_thread(
        store_of(services).files.listed, tenant, asked.purpose, asked.limit, asked.after, asked.order == "asc"
    )
    return Response(encode(page([file_object(f) for f in files], more)), media_type=JSON)


@get("/v1/files/{file_id:str}")
async def retrieve_file(
    request: Request[object, object, State], services: NamedDependency[Services], file_id: FromPath[str]
) -> Response[bytes]:
    tenant = await tenant_of(request, services)
    record = await asyncio.to_thread(store_of(services).files.get, tenant, file_id)
    return Response(encode(file_object(record)), media_type=JSON)


@get("/v1/files/{file_id:str}/content")
async def file_content(
    request: Request[object, object, State], services: NamedDependency[Services], file_id: FromPath[str]
) -> Stream:
    tenant = await tenant_of(request, services)
    files = store_of(services).files
    record = await asyncio.to_thread(files.get, tenant, file_id)
    if not await asyncio.to_thread(files.present, record):
        raise NotFound(f"the bytes of {file_id} are not on this gateway's data folder (batch.md, 'Not done')")
    # A sync iterator: Litestar reads it in a worker thread, a chunk at a time.
    return Stream(files.chunks(record), media_type="application/octet-stream")


@delete("/v1/files/{file_id:str}", status_code=200)
async def delete_file(
    request: Request[object, object, State], services: NamedDependency[Services], file_id: FromPath[str]
) -> Response[bytes]:
    tenant = await tenant_of(request, services)
    await asyncio.to_thread(store_of(services).files.delete, tenant, file_id)
    return Response(encode({"id": file_id, "object": "file", "deleted": True}), media_type=JSON)


FILE_ROUTES = [create_file, list_files, retrieve_file, file_content, delete_file]
