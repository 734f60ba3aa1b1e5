"""People signing in to the admin UI through the organisation's identity provider (OpenID Connect):
the ``[admin_ui.oidc]`` settings, their groups mapped to roles, and the relying party that runs the
authorization code flow and checks ID tokens (docs/sso.md)."""

from gateway.accounts.people._relying_party import RelyingParty, SignInFailed, Verified
from gateway.accounts.people._settings import OidcSettings, check_role, groups_of, person_caller

__all__ = [
    "OidcSettings",
    "RelyingParty",
    "SignInFailed",
    "Verified",
    "check_role",
    "groups_of",
    "person_caller",
]
