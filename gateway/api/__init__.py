"""The HTTP face: OpenAI-compatible handlers, the wire protocol, SSE framing, ASGI I/O, the admin API."""
