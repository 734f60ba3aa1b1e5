"""The SSRF guard: public addresses only, every redirect re-checked, bounded size and time.

Name resolution is a table here and the connector always dials the test's own loopback
server, whatever address it was given: nothing can leave the machine even if the guard broke.
The guard still sees (and must refuse) the addresses the table gives.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from gateway.media import Fetcher, FetchSettings
from gateway.media._failure import FORBIDDEN, INVALID, TOO_LARGE, MediaFailure
from gateway.media.fetch import COULD_NOT_FETCH, forbidden_address, resolve_results

DNS = {
    "public.test": ["93.184.216.34"],
    "other.test": ["198.51.100.7"],  # TEST-NET-2: reserved, not public
    "cdn.example.com": ["151.101.1.1"],
    "loopback.test": ["127.0.0.1"],
    "private.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "linklocal6.test": ["fe80::1"],
    "multicast.test": ["224.0.0.1"],
    "zero.test": ["0.0.0.0"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "mixed.test": ["93.184.216.34", "192.168.1.10"],  # one bad answer spoils the name
}
# Legacy numeric IPv4 forms (and names ending in a number). The table answers each with a public
# address, as a resolver that took them for names might: only the guard's own check stops them.
NUMERIC_FORMS = [
    "127.1",
    "127.0.1",
    "0177.0.0.1",
    "0x7f.1",
    "0x7f.0.0.1",
    "0x7f000001",
    "0",
    "2130706433",
    "017700000001",
    "010.0.0.1",
    "127.000.000.001",
    "127.0.0.1.",
    "1.2.3.4.5",
    "public.0x1",
    "metadata.254",
]
DNS.update({form: ["93.184.216.34"] for form in NUMERIC_FORMS})


class TableResolver(AbstractResolver):
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: Any = socket.AF_INET) -> list[ResolveResult]:
        self.asked.append(host)
        if host not in DNS:
            raise OSError(f"no such host {host}")
        return resolve_results(host, port, DNS[host])

    async def close(self) -> None:
        return None


class Upstream:
    def __init__(self) -> None:
        self.hits: list[str] = []
        self.port = 0
        self.dialed: list[list[str]] = []


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()

    async def handler(request: web.Request) -> web.StreamResponse:
        up.hits.append(f"{request.host}{request.path}")
        path = request.path
        if path == "/img":
            return web.Response(body=b"\x89PNG fake bytes", content_type="image/png")
        if path == "/to-private":
            raise web.HTTPFound("http://private.test/img")
        if path == "/to-literal":
            raise web.HTTPFound("http://127.0.0.1/img")
        if path == "/to-public":
            raise web.HTTPFound("http://cdn.example.com/img")
        if path == "/loop":
            raise web.HTTPFound("/loop")
        if path == "/big":
            return web.Response(body=b"x" * 5000, content_type="image/png")
        if path == "/chunked":
            resp = web.StreamResponse(headers={"Content-Type": "image/png"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for _ in range(10):
                await resp.write(b"y" * 1000)
            return resp
        if path == "/slow":
            await asyncio.sleep(5)
            return web.Response(body=b"late")
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield up
    await runner.cleanup()


def _fetcher(up: Upstream, dial_port: int | None = None, **settings: Any) -> tuple[Fetcher, TableResolver]:
    class ToTestServer(aiohttp.TCPConnector):
        """Dials the test server (or ``dial_port`` on loopback) whatever address the guard let
        through, and records it."""

        async def _wrap_create_connection(self, *args: Any, addr_infos: Any, **kwargs: Any) -> Any:
            up.dialed.append([info[4][0] for info in addr_infos])
            port = up.port if dial_port is None else dial_port
            local = [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", port))]
            return await super()._wrap_create_connection(*args, addr_infos=local, **kwargs)

    config = msgspec.convert({"allow_http": True, **settings}, FetchSettings)
    resolver = TableResolver()
    return Fetcher(config, 2048, resolver=resolver, connector_class=ToTestServer), resolver


async def _refused(fetcher: Fetcher, url: str, kind: str = FORBIDDEN) -> str:
    try:
        with pytest.raises(MediaFailure) as info:
            await fetcher.fetch(url)
    finally:
        await fetcher.aclose()
    assert info.value.kind == kind, info.value.reason
    return info.value.reason


async def test_a_public_host_is_fetched(upstream: Upstream) -> None:
    fetcher, _ = _fetcher(upstream)
    try:
        got = await fetcher.fetch("http://public.test/img")
    finally:
        await fetcher.aclose()
    assert got.data.startswith(b"\x89PNG") and got.content_type == "image/png"
    assert upstream.dialed == [["93.184.216.34"]]


@pytest.mark.parametrize(
    "host",
    [
        "loopback.test",
        "private.test",
        "metadata.test",
        "linklocal6.test",
        "multicast.test",
        "zero.test",
        "mapped.test",
        "mixed.test",
        "other.test",
    ],
)
async def test_names_resolving_to_non_public_addresses_are_refused_before_connecting(
    upstream: Upstream, host: str
) -> None:
    fetcher, resolver = _fetcher(upstream)
    reason = await _refused(fetcher, f"http://{host}/img")
    assert host in reason and resolver.asked == [host]
    assert upstream.dialed == [] and upstream.hits == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/img",
        "http://[::1]/img",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.1.2.3/",
        "http://[fe80::1]/",
        "http://0.0.0.0/",
        "http://[::ffff:10.0.0.1]/",
    ],
)
async def test_literal_non_public_addresses_are_refused(upstream: Upstream, url: str) -> None:
    fetcher, _ = _fetcher(upstream)
    await _refused(fetcher, url)
    assert upstream.dialed == [] and upstream.hits == []


@pytest.mark.parametrize(
    "url", ["file:///etc/passwd", "ftp://public.test/x", "gopher://public.test/", "javascript:alert(1)"]
)
async def test_other_schemes_are_refused(upstream: Upstream, url: str) -> None:
    fetcher, _ = _fetcher(upstream)
    assert "scheme" in await _refused(fetcher, url)
    assert upstream.dialed == []


async def test_plain_http_is_refused_unless_configured(upstream: Upstream) -> None:
    fetcher, _ = _fetcher(upstream, allow_http=False)
    assert "https" in await _refused(fetcher, "http://public.test/img")


async def test_every_redirect_is_checked_again(upstream: Upstream) -> None:
    fetcher, _ = _fetcher(upstream)
    assert "private.test" in await _refused(fetcher, "http://public.test/to-private")
    fetcher, _ = _fetcher(upstream)
    assert "127.0.0.1" in await _refused(fetcher, "http://public.test/to-literal")
    assert upstream.hits == ["public.test/to-private", "public.test/to-literal"]  # never the targets
    fetcher, _ = _fetcher(upstream)
    try:
        got = await fetcher.fetch("http://public.test/to-public")  # a public redirect is followed
    finally:
        await fetcher.aclose()
    assert got.url == "http://cdn.example.com/img"


async def test_redirects_are_bounded(upstream: Upstream) -> None:
    fetcher, _ = _fetcher(upstream, max_redirects=2)
    assert "redirects" in await _refused(fetcher, "http://public.test/loop", INVALID)
    assert len(upstream.hits) == 3


async def test_size_is_bounded_by_length_and_while_reading(upstream: Upstream) -> None:
    fetcher, _ = _fetcher(upstream)
    await _refused(fetcher, "http://public.test/big", TOO_LARGE)
    fetcher, _ = _fetcher(upstream)
    await _refused(fetcher, "http://public.test/chunked", TOO_LARGE)


async def test_time_is_bounded(upstream: Upstream) -> None:
    fetcher, _ = _fetcher(upstream, total_timeout_s=0.5)
    started = time.monotonic()
    reason = await _refused(fetcher, "http://public.test/slow", INVALID)
    assert reason == COULD_NOT_FETCH.format(url="http://public.test/slow")
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("host", NUMERIC_FORMS)
async def test_numeric_ipv4_forms_are_refused_by_the_guard_itself(upstream: Upstream, host: str) -> None:
    fetcher, resolver = _fetcher(upstream)
    reason = await _refused(fetcher, f"http://{host}/img")
    assert "non-canonical numeric IPv4" in reason
    assert resolver.asked == [] and upstream.dialed == [] and upstream.hits == []


@pytest.mark.parametrize(
    "url", ["http://%31%32%37.0.0.1/img", "http://127.0.0.1%09/img", "http://[::1%25lo/"]
)
async def test_hosts_with_odd_characters_are_refused(upstream: Upstream, url: str) -> None:
    fetcher, resolver = _fetcher(upstream)
    await _refused(fetcher, url, INVALID)
    assert resolver.asked == [] and upstream.dialed == []


async def test_a_failed_fetch_says_the_same_whether_refused_timed_out_or_unresolved(
    upstream: Upstream,
) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: the connection is refused
    refused, _ = _fetcher(upstream, dial_port=port)
    timed_out, _ = _fetcher(upstream, total_timeout_s=0.3)
    unresolved, _ = _fetcher(upstream)
    reasons = [
        await _refused(refused, "http://public.test/slow", INVALID),
        await _refused(timed_out, "http://public.test/slow", INVALID),
        await _refused(unresolved, "http://nowhere.test/slow", INVALID),
    ]
    assert reasons[:2] == [COULD_NOT_FETCH.format(url="http://public.test/slow")] * 2
    assert reasons[2] == COULD_NOT_FETCH.format(url="http://nowhere.test/slow")
    for reason in reasons:
        assert not any(
            w in reason.lower() for w in ("refused", "errno", "connect call", "timeout", "too long")
        )


async def test_allow_and_deny_lists(upstream: Upstream) -> None:
    fetcher, _ = _fetcher(upstream, denied_hosts=[".test"])
    assert "deny list" in await _refused(fetcher, "http://public.test/img")
    fetcher, _ = _fetcher(upstream, allowed_hosts=[".example.com"])
    assert "allow list" in await _refused(fetcher, "http://public.test/img")
    fetcher, _ = _fetcher(upstream, allowed_hosts=[".example.com"])
    try:
        assert (await fetcher.fetch("http://cdn.example.com/img")).data
    finally:
        await fetcher.aclose()
    assert upstream.hits == ["cdn.example.com/img"]


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700::1111", True),
        ("100.64.0.1", False),
        ("::1", False),
        ("fd00::1", False),
        ("192.0.2.1", False),
        ("255.255.255.255", False),
    ],
)
def test_address_classes(address: str, public: bool) -> None:
    assert (forbidden_address(address) is None) is public
