"""The floor of any Python HTTP server around the embedding model: what ``bench.embeddings``
measures the gateway against besides the raw session.

A bare ASGI app (no framework, no key, no limits, no cache, no ledger) on uvicorn with uvloop and
httptools, as tiergate serves.  It reads the body, decodes it with msgspec, tokenizes and runs the model
exactly as ``bench.embeddings``' raw path does (``Raw``: the tier's own tokenizer and session, same
options) on one worker thread beside the event loop (an async server may not block its loop for the
model's milliseconds), and writes OpenAI's answer with msgspec.  Whatever the gateway costs beyond this
is its own work; whatever this costs beyond the raw session is the HTTP round trip and the hand-off to
the worker thread, which every server pays.

``--inline`` runs the model on the event loop thread instead, blocking it (no server that serves anyone
else meanwhile can do that): it splits the floor's cost between the HTTP round trip and the hand-off.

    python -m bench.embeddings_floor MODEL_DIR THREADS --port PORT [--inline]
"""

from __future__ import annotations

import argparse
import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import uvicorn

from bench.embeddings import Raw


class Request(msgspec.Struct):
    input: str | list[str]
    model: str = ""


def app_for(raw: Raw, inline: bool = False) -> Any:
    worker = ThreadPoolExecutor(max_workers=1)
    decoder = msgspec.json.Decoder(Request)
    encoder = msgspec.json.Encoder()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        request = decoder.decode(body)
        texts = [request.input] if isinstance(request.input, str) else request.input
        rows = raw.tokenize(texts)
        if inline:  # the model on the event loop itself: no hand-off, and nothing else served meanwhile
            vectors = raw.run(rows)
        else:
            vectors = await asyncio.get_running_loop().run_in_executor(worker, raw.run, rows)
        answer = encoder.encode(
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": v}
                    for i, v in enumerate(vectors.astype(np.float64).tolist())
                ],
                "model": request.model,
                "usage": {"prompt_tokens": sum(map(len, rows)), "total_tokens": sum(map(len, rows))},
            }
        )
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer, "more_body": False})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("threads", type=int, help="ONNX Runtime's intra-op threads (0: its default)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--inline", action="store_true", help="run the model on the event loop")
    args = parser.parse_args()
    uvicorn.run(
        app_for(Raw(args.model_dir, args.threads), inline=args.inline),
        host="127.0.0.1",
        port=args.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="off",
    )


if __name__ == "__main__":
    main()
