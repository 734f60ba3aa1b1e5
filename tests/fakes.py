"""A fault-injecting stand-in for a vLLM server, for faults a real one cannot be made to produce.

Runs an aiohttp server on a loopback port in a background thread.  ``mode`` picks
what ``/v1/chat/completions`` does: ``ok`` answers, ``error500`` fails before any
byte, ``drop_mid_stream`` sends two chunks and then cuts the connection, ``fail_images``
fails (500) only requests that carry an image part and answers the rest (a broken vision
path), ``reset`` aborts the connection before any byte, ``slow`` answers after ``delay_s``,
``hang_after_headers`` sends a 200's headers and then nothing, ``slow_stream`` streams
``stream_chunks`` pieces ``delay_s`` apart.  ``mode`` may be switched while the server runs.
``disconnects`` counts requests whose client (the gateway) went away before the answer ended.

``python -m tests.fakes PORT MODE`` runs one in its own process (to be killed with SIGKILL).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from typing import Any, Self

from aiohttp import web

from tests.conftest import free_port


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    body = {
        "id": "x",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _has_image(body: dict[str, Any]) -> bool:
    return any(
        isinstance(m.get("content"), list) and any(p.get("type") == "image_url" for p in m["content"])
        for m in body.get("messages", [])
    )


class ThreadedApp:
    """An aiohttp application on a loopback port, served from its own thread and event loop, so a
    synchronous test can put it behind a real gateway; ``with`` starts and stops it. Subclasses add
    their routes in :meth:`routes`."""

    def __init__(self, port: int | None = None, client_max_size: int = 1 << 20) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._client_max_size = client_max_size
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        """Run on the server's loop as it stops: close what the handlers opened."""

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._started.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start on port {self.port}")
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.aclose(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=self._client_max_size)
        self.routes(app)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", self.port).start())
        self._started.set()
        self._loop.run_forever()


class FakeVLLM(ThreadedApp):
    def __init__(
        self, mode: str = "ok", delay_s: float = 0.2, port: int | None = None, stream_chunks: int = 100
    ) -> None:
        super().__init__(port)
        self.mode = mode
        self.delay_s = delay_s
        self.stream_chunks = stream_chunks
        self.disconnects = 0
        self.requests: list[dict[str, Any]] = []
        self.request_ids: list[str | None] = []  # each request's X-Request-ID header

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        # Legacy completions get the chat shape too: the cloud wire reads a message's content as it
        # reads a completion's text.
        app.router.add_post("/v1/completions", self._chat)

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "fake"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        self.request_ids.append(request.headers.get("X-Request-ID"))
        if self.mode == "slow":
            await asyncio.sleep(self.delay_s)
        if self.mode == "hang_after_headers":
            return await self._hang_after_headers(request, body)
        if self.mode == "slow_stream" and body.get("stream"):
            return await self._slow_stream(request)
        if self.mode == "reset":
            assert request.transport is not None
            request.transport.abort()
            return web.Response()
        if self.mode == "error500":
            return web.json_response({"error": {"message": "engine crashed"}}, status=500)
        if self.mode == "fail_images" and _has_image(body):
            return web.json_response({"error": {"message": "vision encoder crashed"}}, status=500)
        if self.mode == "echo":
            return await self._echo(request, body)
        if not body.get("stream"):
            return web.json_response(
                {
                    "model": "fake",
                    "choices": [{"message": {"content": "fake answer"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2},
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_chunk("part one, "))
        await resp.write(_chunk("part two"))
        if self.mode == "drop_mid_stream":
            assert request.transport is not None
            request.transport.abort()
            return resp
        await resp.write(_chunk(None, "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):  # as vLLM does: a last usage chunk
            usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            payload = {
                "id": "x",
                "object": "chat.completion.chunk",
                "model": "fake",
                "choices": [],
                "usage": usage,
            }
            await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _echo(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        """Answers with the last message's text, streamed three characters a chunk (so that a
        placeholder the gateway put in is split across chunks)."""
        content = body["messages"][-1]["content"]
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
        usage = {"prompt_tokens": 3, "completion_tokens": len(text) // 3 + 1}
        if not body.get("stream"):
            choice = {"message": {"content": text}, "finish_reason": "stop"}
            return web.json_response({"model": "fake", "choices": [choice], "usage": usage})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(0, len(text), 3):
            await resp.write(_chunk(text[i : i + 3]))
        await resp.write(_chunk(None, "stop"))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _hang_after_headers(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        kind = "text/event-stream" if body.get("stream") else "application/json"
        resp = web.StreamResponse(headers={"Content-Type": kind})
        await resp.prepare(request)
        await _sleep_unless_gone(request, 3600)  # aiohttp has no event for a closed connection
        self.disconnects += 1
        return resp

    async def _slow_stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(self.stream_chunks):
                if _gone(request):
                    raise ConnectionResetError
                await resp.write(_chunk(f"piece {i} "))
                await _sleep_unless_gone(request, self.delay_s)
            await resp.write(_chunk(None, "stop"))
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
        return resp


async def _sleep_unless_gone(request: web.Request, seconds: float) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not _gone(request) and asyncio.get_running_loop().time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(min(0.05, seconds))


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


if __name__ == "__main__":  # a fake in a process of its own: python -m tests.fakes PORT MODE
    fake = FakeVLLM(sys.argv[2], port=int(sys.argv[1]))
    fake._run()
