"""The admin JSON API (``/admin/api/...``): tenants, keys, cost reports, the cloud pool,
routing policies; guarded by keys."""

from gateway.admin._controllers import ADMIN_ROUTES as _ACCOUNT_ROUTES
from gateway.admin._policies import POLICY_ROUTES
from gateway.admin._pool import POOL_ROUTES
from gateway.admin._router import ROUTER_ROUTES
from gateway.admin._service import AdminService

ADMIN_ROUTES = [*_ACCOUNT_ROUTES, *POOL_ROUTES, *POLICY_ROUTES, *ROUTER_ROUTES]

__all__ = ["ADMIN_ROUTES", "AdminService"]
