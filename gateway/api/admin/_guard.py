"""The check every admin-only route makes, through the one rule of :mod:`gateway.accounts.tenants._access`."""

from __future__ import annotations

from litestar import Request
from litestar.datastructures import State

from gateway.accounts.tenants import check_change, check_read
from gateway.services import Services

READS = frozenset({"GET", "HEAD"})


async def require_admin(request: Request[object, object, State], services: Services, what: str) -> None:
    """Raise 401 for a missing or wrong key, 403 for one that may not read (or, for anything but a
    GET, change) the gateway's own settings; ``what`` names the resource."""
    caller = await services.auth.caller(request.headers)
    (check_read if request.method in READS else check_change)(caller, None, what)
