"""Downloading media named by URL, behind a hard SSRF guard.

- Schemes: ``https`` (``http`` only with ``media.fetch.allow_http``); ``file:`` and the rest refused.
- Hosts: a deny list, then an allow list when one is set; literal IP addresses are checked as
  addresses. A host must be a DNS name (letters, digits, ``-``, ``_``, ``.``; IDNA-encoded) or a
  canonical address (``a.b.c.d`` in decimal, or ``[v6]``): the legacy numeric IPv4 forms that
  ``inet_aton`` and browsers read as addresses (``127.1``, ``0177.0.0.1``, ``0x7f.1``, ``0``,
  ``2130706433``), and any name whose last label is a number, are refused here, whatever the HTTP
  client would make of them.
- Addresses: only public ones. Loopback, private, link-local (169.254.0.0/16, fe80::/10),
  multicast, unspecified, reserved, shared (100.64.0.0/10) and IPv4-mapped forms of those are
  refused. The check is made on the DNS answers inside the connector's resolver, so the
  connection goes to exactly the addresses that were checked (no rebinding between check and
  connect); a name with any forbidden answer is refused whole.
- Redirects are followed by hand, each hop checked again, at most ``max_redirects``.
- Size: a Content-Length over the limit is refused before reading; the body is read in chunks and
  abandoned once over the limit. Time: connect and total deadlines.
- A fetch that fails (no answer, refused, reset, timed out, TLS, DNS) gets one message,
  :data:`COULD_NOT_FETCH`, whatever the cause, so the gateway cannot be used to scan ports; the cause
  is logged for the operator.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from dataclasses import dataclass

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from gateway.media._config import FetchSettings
from gateway.media._failure import FORBIDDEN, INVALID, TOO_LARGE, MediaFailure

log = logging.getLogger(__name__)

_REDIRECTS = {301, 302, 303, 307, 308}
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAME_CHARS = re.compile(r"[a-z0-9_.\-]+", re.I)
# A label that inet_aton or the WHATWG URL parser reads as (part of) an IPv4 address.
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)", re.I)
COULD_NOT_FETCH = "could not fetch the medium at {url}"


def forbidden_address(address: str) -> str | None:
    """Why ``address`` may not be fetched from, or None for a public address."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return f"{address!r} is not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped or ip.sixtofour
        if mapped is not None:
            return forbidden_address(str(mapped))
    for what, hit in (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("private", ip.is_private),
        ("reserved", ip.is_reserved),
        ("shared (carrier-grade NAT)", isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED),
        ("not globally routable", not ip.is_global),
    ):
        if hit:
            return f"{ip} is a {what} address"
    return None


def _host_matches(host: str, patterns: list[str]) -> bool:
    host = host.rstrip(".").lower()
    for pattern in patterns:
        p = pattern.lower()
        if host == p.lstrip(".") or (p.startswith(".") and host.endswith(p)):
            return True
    return False


def check_url(url: URL, settings: FetchSettings) -> None:
    """Refuse a URL by scheme, host lists or literal address (before any connection)."""
    allowed_schemes = {"https", "http"} if settings.allow_http else {"https"}
    if url.scheme not in allowed_schemes:
        allowed = " or ".join(sorted(allowed_schemes))
        raise MediaFailure(FORBIDDEN, f"URL scheme {url.scheme or '(none)'!r} is not allowed; use {allowed}")
    host = url.raw_host or ""
    if not host:
        raise MediaFailure(INVALID, "the URL has no host")
    if url.user is not None or url.password is not None:
        raise MediaFailure(FORBIDDEN, "URLs with credentials are not fetched")
    if _host_matches(host, settings.denied_hosts):
        raise MediaFailure(FORBIDDEN, f"host {host} is on the deny list (media.fetch.denied_hosts)")
    if settings.allowed_hosts and not _host_matches(host, settings.allowed_hosts):
        raise MediaFailure(FORBIDDEN, f"host {host} is not on the allow list (media.fetch.allowed_hosts)")
    literal = _literal_address(host)
    if literal is None:
        return  # a name: its DNS answers are checked by PublicResolver
    if why := forbidden_address(literal):
        raise MediaFailure(FORBIDDEN, f"URL host refused: {why}")


def _literal_address(host: str) -> str | None:
    """The canonical IP address ``host`` is, None for a DNS name; refuses every other form."""
    if ":" in host:  # only an IPv6 literal has colons
        try:
            return str(ipaddress.IPv6Address(host.strip("[]").split("%", 1)[0]))
        except ValueError as exc:
            raise MediaFailure(INVALID, f"URL host {host!r} is not a valid IPv6 address") from exc
    if not _NAME_CHARS.fullmatch(host):
        raise MediaFailure(INVALID, f"URL host {host!r} has characters a host name cannot have")
    if not _NUMERIC_LABEL.fullmatch(host.rstrip(".").rsplit(".", 1)[-1]):
        return None
    try:
        return str(ipaddress.IPv4Address(host))  # four decimal parts, no leading zeros
    except ValueError:
        raise MediaFailure(
            FORBIDDEN,
            f"URL host {host!r} is a non-canonical numeric IPv4 form (shortened, octal, hexadecimal or "
            "one number) or a name ending in a number; write an address as four decimal numbers, a.b.c.d",
        ) from None


class PublicResolver(AbstractResolver):
    """Resolves with ``base`` and refuses the name if any answer is not a public address."""

    def __init__(self, base: AbstractResolver | None = None) -> None:
        self._base = base or aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._base.resolve(host, port, family)
        for answer in answers:
            if why := forbidden_address(answer["host"]):
                raise MediaFailure(FORBIDDEN, f"{host} resolves to a forbidden address: {why}")
        if not answers:
            raise MediaFailure(INVALID, f"{host} does not resolve")
        return answers

    async def close(self) -> None:
        await self._base.close()


@dataclass(frozen=True, slots=True)
class Fetched:
    data: bytes
    content_type: str
    url: str  # after redirects


class Fetcher:
    """One aiohttp session whose connector resolves through :class:`PublicResolver`.

    ``resolver`` replaces the system's DNS and ``connector_class`` the TCP connector (tests
    stub both, so nothing leaves the machine even if the guard were broken).
    """

    def __init__(
        self,
        settings: FetchSettings,
        max_bytes: int,
        *,
        resolver: AbstractResolver | None = None,
        connector_class: type[aiohttp.TCPConnector] = aiohttp.TCPConnector,
    ) -> None:
        self._settings = settings
        self._max_bytes = max_bytes
        self._resolver = resolver
        self._connector_class = connector_class
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = self._connector_class(
                resolver=PublicResolver(self._resolver), use_dns_cache=False, limit=64
            )
            s = self._settings
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=s.total_timeout_s, sock_connect=s.connect_timeout_s),
                trust_env=False,  # never through a proxy from the environment
                auto_decompress=True,
            )
        return self._session

    async def fetch(self, url: str) -> Fetched:
        try:
            target = URL(url)
        except ValueError as exc:
            raise MediaFailure(INVALID, f"malformed URL: {exc}") from exc
        session = self._client()
        for _ in range(self._settings.max_redirects + 1):
            check_url(target, self._settings)
            try:
                async with session.get(target, allow_redirects=False) as response:
                    if response.status in _REDIRECTS:
                        location = response.headers.get("Location")
                        if not location:
                            raise MediaFailure(INVALID, f"{target} redirected without a Location")
                        target = target.join(URL(location))
                        continue
                    if response.status != 200:
                        raise MediaFailure(INVALID, f"fetching {target} answered HTTP {response.status}")
                    return Fetched(await self._read(response), response.content_type, str(target))
            except MediaFailure:
                raise
            except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
                raise _failure(exc, target) from exc
        raise MediaFailure(INVALID, f"more than {self._settings.max_redirects} redirects")

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        length = response.content_length
        if length is not None and length > self._max_bytes:
            raise MediaFailure(
                TOO_LARGE, f"the medium is {length} bytes; at most {self._max_bytes} are fetched"
            )
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(65536):
            size += len(chunk)
            if size > self._max_bytes:
                raise MediaFailure(TOO_LARGE, f"the medium is over {self._max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _failure(exc: BaseException, target: URL) -> MediaFailure:
    """The guard's own refusal inside a client error, else one message for every cause (refused,
    reset, timed out, DNS, TLS: the client learns nothing of what is behind the address)."""
    for cause in (getattr(exc, "os_error", None), exc.__cause__, exc.__context__):
        if isinstance(cause, MediaFailure):
            return cause
    log.info("media fetch of %s failed: %s: %s", target, type(exc).__name__, exc)
    return MediaFailure(INVALID, COULD_NOT_FETCH.format(url=target))


def resolve_results(host: str, port: int, addresses: list[str]) -> list[ResolveResult]:
    """ResolveResult dicts for ``addresses`` (for resolvers that answer from a table)."""
    out: list[ResolveResult] = []
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        out.append(
            {"hostname": host, "host": address, "port": port, "family": family, "proto": 0, "flags": 0}
        )
    return out


__all__ = [
    "COULD_NOT_FETCH",
    "Fetched",
    "Fetcher",
    "PublicResolver",
    "check_url",
    "forbidden_address",
    "resolve_results",
]
