"""The tiergate HTTP gateway: ``create_app(settings)`` builds it, ``tiergate serve`` runs it.

The names below are imported on first use, so a process that needs one module of the package
(a media decoding worker imports only ``gateway.media.image`` and its like) does not load the app.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.app import create_app
    from gateway.settings import Settings, load_settings

__all__ = ["Settings", "create_app", "load_settings"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from gateway.app import create_app

        return create_app
    if name in ("Settings", "load_settings"):
        from gateway import settings

        return getattr(settings, name)
    raise AttributeError(f"module 'gateway' has no attribute {name!r}")
