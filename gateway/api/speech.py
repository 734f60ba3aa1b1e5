"""``POST /v1/audio/transcriptions`` and ``/v1/audio/translations``: raw ASGI like chat, through the one
door; the stages are gateway/pipeline/endpoints/speech.py's. This frames what they answer: one body in
the asked ``response_format``, or server-sent events."""

from __future__ import annotations

import dataclasses

from litestar import asgi
from litestar.types import Receive, Scope, Send

from gateway.api.asgi_io import JSONAnswer, SSEResponse
from gateway.api.door import door, respond
from gateway.api.framing import route_headers
from gateway.errors import NotFound
from gateway.pipeline.endpoints.speech import TRANSCRIPTIONS, TRANSLATIONS, Task


def _content_type(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return value.decode("latin-1")
    return ""


async def _speech(scope: Scope, receive: Receive, send: Send, task: Task) -> None:
    endpoint = "transcriptions" if task == "transcribe" else "translations"
    services, incoming, departure = door(scope, receive, endpoint=endpoint)
    pipeline = services.speech
    if pipeline is None:
        path = TRANSCRIPTIONS if task == "transcribe" else TRANSLATIONS
        raise NotFound(
            f"{path} is off here (speech.enabled = false, or the model is not built: scripts/setup.sh)"
        )
    incoming = dataclasses.replace(
        incoming, headers={**incoming.headers, "content-type": _content_type(scope)}
    )
    max_file = services.settings.media.max_part_bytes

    async def make() -> JSONAnswer | SSEResponse:
        answer = await pipeline.run(incoming, task, max_file)
        headers = route_headers(answer.routed)
        if answer.events is not None:
            return SSEResponse(answer.events, headers)
        return JSONAnswer(answer.body, headers, media_type=answer.media_type)

    await respond(scope, receive, send, departure, make)


@asgi(TRANSCRIPTIONS, copy_scope=False)
async def transcriptions(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only: speech to text in its own language."""
    await _speech(scope, receive, send, "transcribe")


@asgi(TRANSLATIONS, copy_scope=False)
async def translations(scope: Scope, receive: Receive, send: Send) -> None:
    """POST only: speech to English text."""
    await _speech(scope, receive, send, "translate")


ROUTES = [transcriptions, translations]
