"""The admin JSON API (``/admin/api/...``): tenants, keys and cost reports, guarded by keys."""

from gateway.admin._controllers import ADMIN_ROUTES
from gateway.admin._service import AdminService

__all__ = ["ADMIN_ROUTES", "AdminService"]
