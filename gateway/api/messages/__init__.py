"""Anthropic's Messages API (``/v1/messages``), translated to and from the chat pipeline."""

from gateway.api.messages.controllers import ROUTES

__all__ = ["ROUTES"]
