"""Run the app under uvicorn (uvloop + httptools), with a bounded graceful shutdown."""

from __future__ import annotations

import logging

import uvicorn

from gateway.app import create_app
from gateway.settings import Settings


def uvicorn_config(settings: Settings) -> uvicorn.Config:
    server = settings.server
    return uvicorn.Config(
        create_app(settings),
        host=server.host,
        port=server.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        log_level=server.log_level,
        access_log=server.access_log,
        timeout_graceful_shutdown=int(server.shutdown_grace_s),
        server_header=False,
    )


def run(settings: Settings) -> None:
    logging.getLogger(__name__).info("data folder: %s", settings.data_path)
    uvicorn.Server(uvicorn_config(settings)).run()
