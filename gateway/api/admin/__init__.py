"""The admin JSON API (``/admin/api/...``): tenants, keys, cost reports, the cloud pool, the edge models,
routing policies; guarded by keys."""

from gateway.api.admin._controllers import ADMIN_ROUTES as _ACCOUNT_ROUTES
from gateway.api.admin._edge import EDGE_ROUTES
from gateway.api.admin._policies import POLICY_ROUTES
from gateway.api.admin._pool import POOL_ROUTES
from gateway.api.admin._router import ROUTER_ROUTES

ADMIN_ROUTES = [*_ACCOUNT_ROUTES, *POOL_ROUTES, *EDGE_ROUTES, *POLICY_ROUTES, *ROUTER_ROUTES]

__all__ = ["ADMIN_ROUTES"]
