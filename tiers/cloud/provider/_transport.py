"""The provider tiers' HTTP client: httpx, kept open per tier, so calls reuse their connections (HTTP/2
where the provider offers it by ALPN, which multiplexes calls on one connection; HTTP/1.1 keep-alive
elsewhere). Certificates are verified, against ``ca_file`` when one is given; ``HTTPS_PROXY`` and
``NO_PROXY`` from the environment are honoured (httpx's ``trust_env``), as on-prem networks need.

Timeouts: ``connect_s`` to open a connection, ``first_byte_s`` for the answer's head and between any
two reads of its body after, ``total_s`` for the whole call (the tier enforces that one)."""

from __future__ import annotations

import importlib.util
import ssl

import httpx

from tiers.cloud.provider._config import ProviderConfig


def _ssl_context(config: ProviderConfig) -> ssl.SSLContext:
    """The system's CAs, or only those of ``ca_file``; hostnames checked either way."""
    if config.ca_file:
        return ssl.create_default_context(cafile=config.ca_file)
    return ssl.create_default_context()


def http2_available() -> bool:
    """httpx speaks HTTP/2 only with the ``h2`` package."""
    return importlib.util.find_spec("h2") is not None


def client_for(config: ProviderConfig) -> httpx.AsyncClient:
    """One tier's client. Raises :class:`OSError`/:class:`ssl.SSLError` for a ``ca_file`` that cannot be
    read as PEM."""
    t = config.timeouts
    return httpx.AsyncClient(
        verify=_ssl_context(config),
        http2=config.http2 and http2_available(),
        trust_env=True,
        timeout=httpx.Timeout(
            connect=t.connect_s, read=t.first_byte_s, write=t.first_byte_s, pool=t.connect_s
        ),
        limits=httpx.Limits(
            max_connections=config.max_connections,
            max_keepalive_connections=config.max_connections,
            keepalive_expiry=60.0,
        ),
        follow_redirects=False,
    )
