"""``POST /v1/completions``, OpenAI's legacy completions, on the chat pipeline's stages.

The body is translated once (:mod:`gateway.wire.completions`) into one chat request per prompt, run
by the same pipeline as Chat Completions in its raw-prompt mode (the prompt goes to the model as it
is, no chat template; the cache keeps raw and chat answers apart): the same key, limits, routing,
cache, breakers and ledger. A list of prompts is one pipeline run per prompt, all started at once;
the answers are merged in order (:mod:`.answer`). The handler itself is in gateway/api/controllers.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence

from gateway.accounts.tenants import Authenticator
from gateway.api.completions.answer import event_stream, json_body
from gateway.pipeline.answer import Answer
from gateway.pipeline.chat import ChatPipeline
from gateway.pipeline.front import Incoming, Parse
from gateway.wire.chat import ChatCompletionRequest
from gateway.wire.completions import Completions, parse_completions
from gateway.wire.decoding import decoded

__all__ = ["Completions", "Run", "event_stream", "json_body", "parse_completions", "start"]


def _given(request: ChatCompletionRequest) -> Parse:
    async def parse(body: bytes, tenant: str) -> ChatCompletionRequest:
        return request  # decoded and translated already, once for every prompt

    return parse


Run = Callable[[], Awaitable[Answer]]  # one prompt's pipeline run, begun when called


async def start(
    pipeline: ChatPipeline, auth: Authenticator, incoming: Incoming
) -> tuple[Completions, list[Answer], list[Run]]:
    """Authenticate (before the body is read, as the chat path does), parse, and run the pipeline
    once per prompt; each run authenticates again (a cached look-up) and is counted by the limits and
    the ledger as a request of its own (runs after the first have the request id suffixed ``-1``,
    ``-2``, ...). The first run's errors are this request's status.

    A JSON request's answers are all read here (they are read whole), :data:`IN_FLIGHT` prompts at a
    time, so one request cannot fill a tier's admission lanes by itself; any failure fails it. A
    stream begins with the first prompt's answer; the others are the runs returned, each begun when
    the one before has been streamed (a begun stream holds its admission slot until it is read)."""
    if incoming.deferred is None:  # a batch line's caller is known
        await auth.caller(incoming.headers)
    body = await incoming.body()
    completions = await decoded(parse_completions, body)

    async def given() -> bytes:
        return body

    def run(i: int, request: ChatCompletionRequest) -> Run:
        rid = incoming.request_id
        one = dataclasses.replace(
            incoming,
            body=given,
            request_id=f"{rid}-{i}" if i else rid,
            parse=_given(request),
            raw_prompt=True,
            endpoint="completions",
        )
        return lambda: pipeline.run(one)

    runs = [run(i, request) for i, request in enumerate(completions.requests)]
    if completions.stream:
        return completions, [await runs[0]()], runs[1:]
    return completions, await _all(runs), []


IN_FLIGHT = 4  # a JSON request's prompts run at once: within every lane's minimum of waiters


async def _all(runs: list[Run]) -> list[Answer]:
    gate = asyncio.Semaphore(IN_FLIGHT)

    async def bounded(run: Run) -> Answer:
        async with gate:
            return await run()

    tasks = [asyncio.ensure_future(bounded(run)) for run in runs]
    try:
        await asyncio.wait(tasks)
        return [task.result() for task in tasks]  # the first failure (in prompt order) is raised
    except BaseException:
        await _release(tasks)
        raise


async def _release(runs: Sequence[asyncio.Future[Answer]]) -> None:
    """Close the events of every run that answered; cancel the others (their errors are read, so
    none is reported as never retrieved)."""
    for run in runs:
        if not run.done():
            run.cancel()
        elif not run.cancelled() and run.exception() is None:
            await run.result().events.aclose()
