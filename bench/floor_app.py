"""The web framework's own floor: Litestar on uvicorn (as tiergate runs) returning a canned answer.

python bench/floor_app.py PORT
"""

from __future__ import annotations

import sys

import uvicorn
from litestar import Litestar, Request, Response, post

from bench.upstream import COMPLETION


@post("/v1/chat/completions", status_code=200)
async def canned(request: Request[object, object, object]) -> Response[bytes]:
    await request.body()
    return Response(COMPLETION, media_type="application/json")


app = Litestar([canned], openapi_config=None)

if __name__ == "__main__":
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=int(sys.argv[1]),
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
    )
