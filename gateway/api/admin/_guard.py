"""The check every admin-only route makes: the caller's key is an admin key."""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from gateway.errors import PermissionDenied
from gateway.services import Services


async def require_admin(request: Request[object, object, State], services: Services, what: str) -> None:
    """Raise 401 for a missing or wrong key, 403 for a tenant's key; ``what`` names the resource."""
    caller = await services.auth.caller(request.headers)
    if not caller.is_admin:
        raise PermissionDenied(f"{what} managed with an admin key")
