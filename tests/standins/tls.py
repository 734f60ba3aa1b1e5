"""A test certificate authority (``trustme``) and a loopback HTTPS server thread for provider stand-ins.

    ca = TestCA.make(tmp_path)            # ca.ca_file: the PEM a tier's ca_file names
    server = ServerThread(app, ca)        # any ASGI app, served by uvicorn over TLS on 127.0.0.1
    server.start(); server.url            # "https://127.0.0.1:<port>"; server.stop()

The certificate names 127.0.0.1 and localhost; nothing but the test CA trusts it, so a client that
verifies (as tiergate's provider tiers do) must be given ``ca_file``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trustme
import uvicorn


@dataclass(frozen=True)
class TestCA:
    __test__ = False  # not a test class, for pytest
    ca_file: Path  # the CA certificate (PEM): what clients trust
    cert_file: Path  # the server's chain (PEM)
    key_file: Path  # the server's private key (PEM)

    @classmethod
    def make(cls, folder: Path) -> TestCA:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1", "localhost")
        folder.mkdir(parents=True, exist_ok=True)
        out = cls(folder / "ca.pem", folder / "server.pem", folder / "server.key")
        ca.cert_pem.write_to_path(str(out.ca_file))
        cert.private_key_pem.write_to_path(str(out.key_file))
        with out.cert_file.open("wb") as f:
            for blob in cert.cert_chain_pems:
                f.write(blob.bytes())
        return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServerThread:
    """An ASGI app served over TLS by uvicorn in a thread of the test process (its own event loop)."""

    def __init__(self, app: Any, ca: TestCA, port: int = 0) -> None:
        self.port = port or _free_port()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=self.port,
            ssl_certfile=str(ca.cert_file),
            ssl_keyfile=str(ca.key_file),
            log_level="warning",
            lifespan="off",
            timeout_keep_alive=30,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"standin-{self.port}")

    def _run(self) -> None:
        asyncio.run(self._server.serve())

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the stand-in did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


class H2ServerThread:
    """The same over HTTP/2 (hypercorn, offering ``h2`` then ``http/1.1`` by ALPN), as the hosted
    providers that speak it do; uvicorn speaks only HTTP/1.1."""

    def __init__(self, app: Any, ca: TestCA) -> None:
        from hypercorn.config import Config

        self.port = _free_port()
        self._config = Config()
        self._config.bind = [f"127.0.0.1:{self.port}"]
        self._config.certfile, self._config.keyfile = str(ca.cert_file), str(ca.key_file)
        self._config.alpn_protocols = ["h2", "http/1.1"]
        self._app = app
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        from hypercorn.asyncio import serve

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._loop.call_soon(self._started.set)
        await serve(self._app, self._config, shutdown_trigger=self._stop.wait)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> H2ServerThread:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError("the stand-in did not start")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until it listens
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.02)
        raise RuntimeError("the stand-in does not listen")

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)
