"""A stand-in cloud for ``bench.route_replay`` where vLLM cannot run: the OpenAI chat API over a
real llama.cpp model (the edge's GGUF unless ``--model``), one generation at a time.

It answers what the cloud tier asks of vLLM (``/health``, ``/v1/models``, ``/v1/chat/completions``
with and without streaming, usage in the last chunk).  It is slower per request than a batching
vLLM under load, so replays against it understate what a real cloud pool does; it exists so the
router can be measured on real models on a machine whose vLLM is busy.

    .venv/bin/python -m bench.llama_upstream --port 8399 [--model FILE.gguf] [--threads 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

MODEL_NAME = "cloud-standin-llamacpp"


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "standin",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": MODEL_NAME,
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        body["usage"] = usage
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class Upstream:
    def __init__(self, model: str, threads: int) -> None:
        from llama_cpp import Llama

        self._llm = Llama(model_path=model, n_ctx=2048, n_threads=threads, verbose=False)
        self._engine = ThreadPoolExecutor(1, thread_name_prefix="llama")

    def _args(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "messages": body["messages"],
            "max_tokens": body.get("max_tokens") or 256,
            "temperature": body.get("temperature", 0.7) if body.get("temperature") is not None else 0.7,
        }

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": MODEL_NAME}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        loop = asyncio.get_running_loop()
        if not body.get("stream"):
            out = await loop.run_in_executor(
                self._engine, lambda: self._llm.create_chat_completion(**self._args(body))
            )
            out["model"] = MODEL_NAME
            return web.json_response(out)
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        cancelled = threading.Event()

        def generate() -> None:
            completion = prompt = 0
            try:
                prompt = len(self._llm.tokenize(json.dumps(body["messages"]).encode()))
                for piece in self._llm.create_chat_completion(**self._args(body), stream=True):
                    if cancelled.is_set():
                        return
                    choice = piece["choices"][0]
                    if choice["delta"].get("content"):
                        completion += 1
                    loop.call_soon_threadsafe(
                        queue.put_nowait, _chunk(choice["delta"], choice["finish_reason"])
                    )
                usage = {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                }
                loop.call_soon_threadsafe(queue.put_nowait, _chunk({}, usage=usage))
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        loop.run_in_executor(self._engine, generate)
        try:
            while (item := await queue.get()) is not None:
                await resp.write(item)
            await resp.write(b"data: [DONE]\n\n")
        finally:
            cancelled.set()
        return resp


def main() -> None:
    from tiers.edge._llamacpp import shipped_model_path

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", help="a GGUF file [default: the edge's shipped SmolLM2]")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    upstream = Upstream(args.model or str(shipped_model_path()), args.threads)
    app = web.Application()
    app.router.add_get("/health", upstream.health)
    app.router.add_get("/v1/models", upstream.models)
    app.router.add_post("/v1/chat/completions", upstream.chat)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
