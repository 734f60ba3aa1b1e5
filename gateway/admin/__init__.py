"""The admin JSON API (``/admin/api/...``): tenants, keys, cost reports, the cloud pool, the edge models;
guarded by keys."""

from gateway.admin._controllers import ADMIN_ROUTES as _ACCOUNT_ROUTES
from gateway.admin._edge import EDGE_ROUTES
from gateway.admin._pool import POOL_ROUTES
from gateway.admin._service import AdminService

ADMIN_ROUTES = [*_ACCOUNT_ROUTES, *POOL_ROUTES, *EDGE_ROUTES]

__all__ = ["ADMIN_ROUTES", "AdminService"]
