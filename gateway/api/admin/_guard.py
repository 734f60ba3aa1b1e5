"""The check every admin-only route makes, through the one rule of
:mod:`gateway.accounts.tenants._access`, and the audit row a change made outside the stores (a tier's
members, drains, edge model swaps) records."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.datastructures import State

from gateway.accounts.admin import actor_of
from gateway.accounts.audit import Event
from gateway.accounts.tenants import Caller, check_change, check_read
from gateway.services import Services

READS = frozenset({"GET", "HEAD"})


async def require_admin(request: Request[object, object, State], services: Services, what: str) -> Caller:
    """Raise 401 for a missing or wrong key, 403 for one that may not read (or, for anything but a
    GET, change) the gateway's own settings; ``what`` names the resource."""
    caller = await services.auth.caller(request.headers)
    (check_read if request.method in READS else check_change)(caller, None, what)
    return caller


async def record(
    services: Services, caller: Caller, action: str, object_type: str, object_id: str, before: Any, after: Any
) -> None:
    """One audit row for a change this request made (made already: the row follows it)."""
    event = Event(
        actor=actor_of(caller),
        action=action,
        object_type=object_type,
        object_id=object_id,
        before=before,
        after=after,
    )
    await services.audit.record_async(event)
