"""The tiergate HTTP gateway: ``create_app(settings)`` builds it, ``tiergate serve`` runs it."""

from gateway.app import create_app
from gateway.settings import Settings, load_settings

__all__ = ["Settings", "create_app", "load_settings"]
