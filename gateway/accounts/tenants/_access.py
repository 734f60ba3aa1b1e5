"""The one rule of who may read and change what, for the admin API and the admin UI alike.

Every caller is a :class:`~gateway.accounts.tenants.Caller`: an admin key, a tenant's key, or a person
signed in to the admin UI through single sign-on (an admin, a viewer or a tenant admin). The admin
API's handlers and the admin UI's pages both ask here (directly, or through
:class:`~gateway.accounts.admin.AdminService`, which asks here), so a key and a person with the same
role get the same answer:

- an admin reads and changes everything;
- a viewer reads everything and changes nothing (403);
- a tenant admin (key or person) reads and changes its own tenants' keys and policies and reads their
  costs; another tenant does not exist for it (404, as OpenAI answers for what a key cannot see), and
  what belongs to no tenant (the tiers, the cloud pool, the default policy) is refused (403);
- a tenant's inference key reads its own tenant and changes nothing here.
"""

from __future__ import annotations

from gateway.accounts.tenants._models import TENANT_ADMIN, Caller
from gateway.errors import NotFound, PermissionDenied

READ_ONLY = "a viewer sees everything and changes nothing"


def check_read(caller: Caller, tenant: str | None, what: str) -> None:
    """``tenant``: the tenant the thing belongs to, None for the gateway's own (tiers, pool, default
    policy); ``what`` names it for the refusal ("the cloud pool is")."""
    if tenant is None:
        if not caller.sees_all:
            raise PermissionDenied(f"{what} managed by an admin")
    elif not caller.may_see(tenant):
        raise NotFound(f"no tenant named {tenant!r}")


def check_change(caller: Caller, tenant: str | None, what: str) -> None:
    """May ``caller`` change it: the read check, then viewers refused, then tenant admins for their
    own tenants only."""
    check_read(caller, tenant, what)
    if caller.read_only:
        raise PermissionDenied(READ_ONLY)
    if caller.is_admin:
        return
    if tenant is None:
        raise PermissionDenied(f"{what} changed by an admin")
    if caller.role != TENANT_ADMIN:
        raise PermissionDenied(f"{what} changed by an admin or the tenant's admin, not an inference key")


def check_not_read_only(caller: Caller) -> None:
    if caller.read_only:
        raise PermissionDenied(READ_ONLY)
