"""A fast OpenAI-compatible upstream stand-in for overhead benchmarks.

A raw asyncio protocol on uvloop (a few microseconds per request) that answers
``POST /v1/chat/completions`` with a fixed completion, or with a short SSE
stream when the body asks for ``"stream": true``; ``GET /health`` and
``GET /v1/models`` answer as vLLM's do.  HTTP/1.1 keep-alive, no chunk parsing
of requests (bodies carry Content-Length).

    python bench/upstream.py PORT
"""

from __future__ import annotations

import asyncio
import json
import sys

import uvloop

USAGE = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hello there!"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }
).encode()


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


STREAM_EVENTS = (
    _event(_chunk({"role": "assistant", "content": ""}))
    + _event(_chunk({"content": "Hello"}))
    + _event(_chunk({"content": " there!"}))
    + _event(_chunk({}, "stop"))
    + _event(
        {
            **_chunk({}),
            "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        }
    )
    + b"data: [DONE]\n\n"
)


def _response(body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


NON_STREAM = _response(COMPLETION)
STREAM = _response(STREAM_EVENTS, b"text/event-stream")
HEALTH = _response(b"")
MODELS = _response(b'{"object":"list","data":[{"id":"bench","object":"model"}]}')


class Upstream(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                length = int(head[at + 15 : head.find(b"\r\n", at) if head.find(b"\r\n", at) > 0 else None])
            end = head_end + 4 + length
            if len(self.buffer) < end:
                return
            body, self.buffer = self.buffer[head_end + 4 : end], self.buffer[end:]
            if head.startswith(b"get /health"):
                self.transport.write(HEALTH)
            elif head.startswith(b"get /v1/models"):
                self.transport.write(MODELS)
            elif b'"stream":true' in body.replace(b" ", b""):
                self.transport.write(STREAM)
            else:
                self.transport.write(NON_STREAM)


async def main(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Upstream, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(main(int(sys.argv[1])))
