"""OpenAI's Files and Batch APIs (``/v1/files``, ``/v1/batches``) and the runner that works the
batches' lines on idle capacity (:mod:`.runner`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from gateway.api.batches.controllers import BATCH_ROUTES
from gateway.api.batches.files import FILE_ROUTES
from gateway.api.batches.runner import BatchRunner
from gateway.services import Services

ROUTES = [*FILE_ROUTES, *BATCH_ROUTES]


@contextlib.asynccontextmanager
async def running_batches(services: Services) -> AsyncIterator[BatchRunner | None]:
    """This gateway's batch runner, from start to stop (none when ``batch.enabled`` is off)."""
    if services.batches is None:
        yield None
        return
    runner = BatchRunner(services, services.batches)
    task = asyncio.create_task(runner.run(), name="batch runner")
    try:
        yield runner
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await runner.aclose()


__all__ = ["ROUTES", "BatchRunner", "running_batches"]
