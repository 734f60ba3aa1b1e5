"""Who is on the other end of a request: its client address and scheme, proxies taken into account.

Behind a reverse proxy every request comes from the proxy's address over plain HTTP. For peers
listed in ``server.trusted_proxies`` (addresses or networks), the last ``X-Forwarded-For`` entry not
itself a trusted proxy is the client, and ``X-Forwarded-Proto`` the scheme (so a request that reached
the proxy over HTTPS counts as HTTPS: the admin cookie stays ``Secure``). Any other peer's forwarding
headers are ignored: a client cannot name its own address.

:class:`ClientAddressMiddleware` (ASGI) sets the scope's ``client`` and ``scheme`` and the context
variable :data:`CLIENT_HOST` (copied into every task the request starts, as the request id is), which
the failed-authentication throttle counts by.
"""

from __future__ import annotations

import contextvars
import ipaddress
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

CLIENT_HOST: contextvars.ContextVar[str | None] = contextvars.ContextVar("tiergate_client_host", default=None)

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """``server.trusted_proxies`` as networks (ValueError names a bad entry)."""
    out = []
    for entry in entries:
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"server.trusted_proxies: {entry!r} is not an address or network") from exc
    return tuple(out)


def _trusted(host: str, networks: tuple[Network, ...]) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in network for network in networks)


def _header(scope: Scope, name: bytes) -> str:
    values = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k.lower() == name]
    return ",".join(values)


def client_of(scope: Scope, networks: tuple[Network, ...]) -> tuple[str | None, str]:
    """(client address, scheme) of an HTTP scope."""
    peer = scope.get("client")
    host: str | None = peer[0] if peer else None
    scheme = str(scope.get("scheme", "http"))
    if host is None or not networks or not _trusted(host, networks):
        return host, scheme
    hops = [h.strip() for h in _header(scope, b"x-forwarded-for").split(",") if h.strip()]
    for hop in reversed(hops):
        host = hop
        if not _trusted(hop, networks):
            break
    proto = _header(scope, b"x-forwarded-proto").split(",")[-1].strip().lower()
    if proto in ("http", "https"):
        scheme = proto
    return host, scheme


class ClientAddressMiddleware:
    def __init__(self, app: ASGIApp, trusted_proxies: tuple[Network, ...] = ()) -> None:
        self._app = app
        self._networks = trusted_proxies

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        host, scheme = client_of(scope, self._networks)
        if self._networks:
            scope = dict(scope)
            if host is not None:
                port = scope["client"][1] if scope.get("client") else 0
                scope["client"] = (host, port)
            scope["scheme"] = scheme
        token = CLIENT_HOST.set(host)
        try:
            await self._app(scope, receive, send)
        finally:
            CLIENT_HOST.reset(token)
