"""Run the app under uvicorn (uvloop + httptools), with a bounded graceful shutdown."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path

import uvicorn

from gateway.accounts.storage import DataFolderLock
from gateway.app import create_app
from gateway.ops import logs
from gateway.ops.httpguard import guarded_protocol
from gateway.settings import Settings, SettingsError


def uvicorn_config(
    settings: Settings, reload_settings: Callable[[], Settings] | None = None
) -> uvicorn.Config:
    server = settings.server
    return uvicorn.Config(
        create_app(settings, reload_settings=reload_settings),
        host=server.host,
        port=server.port,
        loop="uvloop",
        # httptools, with deadlines and bounds on request headers (slow-loris, header floods)
        http=guarded_protocol(settings.http),
        timeout_keep_alive=settings.http.keep_alive_s,
        lifespan="on",
        log_level=server.log_level,
        log_config=None,  # our handler on the root logger (gateway.ops.logs) formats uvicorn's lines too
        access_log=server.access_log,
        timeout_graceful_shutdown=int(server.shutdown_grace_s),
        server_header=False,
        # Forwarding headers are read by gateway.ops.clients, from server.trusted_proxies only
        # (uvicorn's own default would believe any peer on 127.0.0.1).
        proxy_headers=False,
        ssl_certfile=str(Path(server.tls_cert).expanduser()) if server.tls_cert else None,
        ssl_keyfile=str(Path(server.tls_key).expanduser()) if server.tls_key else None,
    )


# The event loop shares the GIL with a few helper threads (the ledger's loads into the
# database, reads of keys, policies and budgets). A thread running Python keeps the GIL for up
# to the switch interval (5 ms by default) while the requests behind the loop wait; 0.5 ms
# bounds that wait. Measured at 500 requests/s on one core (bench/overhead.py's set-up, load
# from bench/loadgen.py), p99 latency over 6 s runs: 4.7-7.7 ms with 5 ms, 2.9-4.1 ms with 0.5 ms.
SWITCH_INTERVAL_S = 0.0005


def check_exposure(settings: Settings) -> None:
    """Refuse settings that would serve without keys beyond this machine (SettingsError says why)."""
    auth, server = settings.auth, settings.server
    for name, path in (("server.tls_cert", server.tls_cert), ("server.tls_key", server.tls_key)):
        if path and not Path(path).expanduser().is_file():
            raise SettingsError(f"{name} = {path!r}: no such file")
    if auth.open_mode and not server.on_loopback and not auth.allow_open_mode_on_network:
        raise SettingsError(
            f"auth.open_mode is on and server.host = {server.host!r} is not a loopback address: anyone "
            "who reaches the port would be the `default` tenant. Serve on 127.0.0.1, turn open mode off, "
            "or say it is meant with auth.allow_open_mode_on_network = true (--allow-open-mode-on-network)"
        )


def run(settings: Settings, reload_settings: Callable[[], Settings] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; SIGHUP applies ``reload_settings()``'s cloud pool membership.
    Raises, before anything starts, :class:`SettingsError` for settings :func:`check_exposure`
    refuses, and :class:`DataFolderInUse` while another gateway serves from the same data folder."""
    check_exposure(settings)
    with DataFolderLock(settings.data_path):
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        logs.configure(settings.observability.log_format, settings.server.log_level)
        logging.getLogger(__name__).info("data folder: %s", settings.data_path)
        uvicorn.Server(uvicorn_config(settings, reload_settings)).run()
