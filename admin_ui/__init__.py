"""The operator's web page, served by the gateway at ``/admin/``.

Server-rendered pages (Jinja2 templates through Litestar) with a little JavaScript of its
own for the live parts and the charts; every asset ships in this package (no CDN), so the
page works on a machine without internet access.  Sign in through the organisation's identity
provider (single sign-on, ``[admin_ui.oidc]``) or with an admin key.

    create_admin_ui(settings)  →  a Litestar Router for /admin (pages, data, static files)
    template_config()          →  the Jinja2 templates, for the app's template_config
    plugin(settings)           →  both, as the Litestar plugin the gateway loads from its
                                  ``tiergate.plugins`` entry point (None when the UI is off)
"""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from litestar import Router
from litestar.config.app import AppConfig
from litestar.di import Provide
from litestar.plugins import InitPluginProtocol
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template import TemplateConfig

from admin_ui._batches import BATCH_ROUTES
from admin_ui._context import UI, problem, refused
from admin_ui._costs import COST_ROUTES
from admin_ui._format import key_limit_label, limit_label, usd, utc_time
from admin_ui._guard import CsrfRefused, SignInRequired, to_sign_in
from admin_ui._live import LIVE_ROUTES
from admin_ui._policies import POLICY_ROUTES
from admin_ui._quality import QUALITY_ROUTES
from admin_ui._signin import SIGN_IN_ROUTES
from admin_ui._sso import SSO_ROUTES
from admin_ui._tenants import TENANT_ROUTES
from gateway.errors import GatewayError
from gateway.settings import AdminUISettings, Settings

HERE = Path(__file__).resolve().parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"


def template_config() -> TemplateConfig[JinjaTemplateEngine]:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(utc_time=utc_time, usd=usd, limit_label=limit_label, key_limit_label=key_limit_label)
    return TemplateConfig(instance=JinjaTemplateEngine.from_environment(env))


def create_admin_ui(settings: AdminUISettings) -> Router:
    ui = UI(settings)
    static = create_static_files_router(
        path="/static", directories=[STATIC], name="admin_ui:static", include_in_schema=False
    )
    return Router(
        path="/admin",
        route_handlers=[
            *SIGN_IN_ROUTES,
            *SSO_ROUTES,
            *LIVE_ROUTES,
            *TENANT_ROUTES,
            *POLICY_ROUTES,
            *COST_ROUTES,
            *QUALITY_ROUTES,
            *BATCH_ROUTES,
            static,
        ],
        dependencies={"ui": Provide(lambda: ui, use_cache=True, sync_to_thread=False)},
        exception_handlers={SignInRequired: to_sign_in, CsrfRefused: refused, GatewayError: problem},
        include_in_schema=False,
    )


class AdminUIPlugin(InitPluginProtocol):
    """Mounts the admin UI's router and its templates on the gateway's app."""

    def __init__(self, settings: AdminUISettings) -> None:
        self._settings = settings

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.route_handlers.append(create_admin_ui(self._settings))
        app_config.template_config = template_config()
        return app_config


def plugin(settings: Settings) -> AdminUIPlugin | None:
    return AdminUIPlugin(settings.admin_ui) if settings.admin_ui.enabled else None


__all__ = ["AdminUIPlugin", "create_admin_ui", "plugin", "template_config"]
