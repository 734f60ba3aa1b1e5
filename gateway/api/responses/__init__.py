"""The Responses API (``/v1/responses``), translated to and from the chat pipeline."""

from gateway.api.responses.controllers import ROUTES

__all__ = ["ROUTES"]
